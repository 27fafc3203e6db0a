"""A deployment search space: which GPUs, tensor-parallel degrees, layouts, policies and KV tiers
to try.

The space is a YAML file (or a mapping) read as strictly as a scenario:

    gpus: [a100-80g, h100-sxm, {name: h200, usd_per_gpu_hour: 3.5}]  # catalog names or mappings
    tensor_parallel: [1, 2, 4, 8]          # GPUs per instance (default: these four)
    layouts: [colocated, 1p1d, 1p2d]       # colocated, or xPyD: x prefill per y decode instances
    policies:                              # policy mappings; a list of values: one per value
      - {name: continuous, max_num_seqs: [128, 256]}
      - {name: chunked, max_num_batched_tokens: [512, 2048]}
    kv_tiers:                              # KV memory below the GPU (default: the scenario's)
      - null                               # no tiers
      - {dram: {capacity_gb: 256}}
      - {remote: {capacity_gb: 2048}, label: store}
    router: least_outstanding_tokens       # colocated router (default: the scenario's)
    link: {bandwidth_gb_per_s: 50}         # P/D KV link (default: the scenario's)
    max_instances: 64                      # the most instances a fleet may have

A GPU entry takes any hardware field (price and power included) and an optional `label` that
names it in the results (to offer one GPU at two prices). A `kv_tiers` option is null (no tiers)
or a scenario's `kv_tiers` mapping (`sim.scenario.kv_tiers`), named in the results by its tiers
(`dram256+remote2048`, `no tiers`; `eviction` and `overlap` when it says so) or by its own
`label`; its rent joins the fleet's dollars per hour. Without the key every configuration keeps
the scenario's own tiers and its label says nothing of them.

A configuration is one GPU, one degree, one layout, one policy and one tier option; the space is
their product. Configurations that cannot run are set aside here, before anything is simulated:
the model does not fit the GPUs at that degree (or the degree cannot shard it), static batching
is asked to split into prefill and decode pools, or a tier option meets a policy without prefix
caching (a tier holds blocks by content hash). The last is set aside rather than refused, so
that one space can weigh a policy without caching (and no tiers) against caching with tiers.
Every other problem (a bad key or value) is an error naming the space file and the key.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter, ValidationError

from sim.costs.catalog import HardwareSpec, ModelSpec, check_fits
from sim.errors import ScenarioError
from sim.inputs.messages import as_error, problems
from sim.inputs.strict_model import StrictModel
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import read_text
from sim.scenario.kv_tiers import KVTiersSpec
from sim.scenario.schema import LinkSpec, PolicySpec, RouterName

MAX_CONFIGS = 5000
LAYOUT = re.compile(r"(\d+)p(\d+)d")
# short names of policy limits in a configuration's label
SHORT = {"max_num_seqs": "seqs", "max_num_batched_tokens": "budget",
         "max_batch_size": "batch", "max_prefill_seqs": "prefills"}  # fmt: skip


def _layout(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(
            "not a layout: write colocated or xPyD such as 1p2d (YAML reads an unquoted 1:2 as "
            "a number in base 60)"
        )
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a layout: write colocated or xPyD such as 1p2d")
    found = LAYOUT.fullmatch(value)
    counts = (int(found[1]), int(found[2])) if found else (0, 0)
    if value != "colocated" and not all(1 <= n <= 16 for n in counts):
        raise ValueError(
            f"{value!r} is not a layout: write colocated or xPyD such as 1p2d (x prefill per y "
            "decode instances, each from 1 to 16)"
        )
    return value


class SpaceSpec(StrictModel):
    gpus: list[str | dict[str, Any]] = Field(min_length=1)
    tensor_parallel: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default=[1, 2, 4, 8], min_length=1
    )
    layouts: list[Annotated[Any, AfterValidator(_layout)]] = Field(
        default=["colocated"], min_length=1
    )
    policies: list[dict[str, Any]] | None = Field(default=None, min_length=1)
    kv_tiers: list[dict[str, Any] | None] | None = Field(default=None, min_length=1)
    router: RouterName | None = None
    link: LinkSpec | None = None
    max_instances: int = Field(default=64, ge=1, le=4096)


@dataclass(frozen=True)
class Config:
    """One point of the space: a GPU at a degree, a layout and a policy."""

    id: str
    gpu: str  # the GPU's label
    hardware: dict[str, Any]  # the hardware mapping, tensor_parallel included
    tensor_parallel: int
    layout: str  # colocated | xPyD
    prefill: int  # per unit (0: colocated)
    decode: int
    policy: dict[str, Any]
    policy_label: str
    # the space's tier option: its mapping (None: no tiers) and its name; tiers_label None: the
    # space lists no kv_tiers, so the scenario's own apply
    kv_tiers: dict[str, Any] | None = None
    tiers_label: str | None = None

    @property
    def label(self) -> str:
        label = f"{self.gpu} tp{self.tensor_parallel} | {self.layout} | {self.policy_label}"
        return label if self.tiers_label is None else f"{label} | {self.tiers_label}"

    @property
    def unit_size(self) -> int:
        """Instances in one unit: one, or a P/D group of x prefill and y decode instances."""
        return self.prefill + self.decode if self.prefill else 1

    @property
    def unit_gpus(self) -> int:
        return self.unit_size * self.tensor_parallel


@dataclass(frozen=True)
class Expanded:
    space: SpaceSpec
    file: str
    configs: list[Config]  # the configurations that can run, in space order
    set_aside: list[tuple[Config, str, str]]  # (config, category, reason): cannot run
    every: list[Config]  # all of them, in space order


def read_space(space: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[SpaceSpec, str]:
    """The validated space and the file label its errors name."""
    if isinstance(space, Mapping):
        raw, file = copy.deepcopy(dict(space)), "<space>"
    else:
        file = os.fspath(space)
        raw = load_yaml(read_text(Path(space), "search space file"), file)
    if not isinstance(raw, dict):
        raise ScenarioError("a search space must be a YAML mapping", file=file)
    return validated(SpaceSpec, raw, file, ""), file


def validated(kind: type[BaseModel], data: Any, file: str, prefix: str) -> Any:
    """`kind` validated from `data`; its problems as one ScenarioError under the key `prefix`."""
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        found = problems(exc, kind)
        named = [(".".join(p for p in (prefix, path) if p), why) for path, why in found]
        raise as_error(named, file) from None


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _gpus(space: SpaceSpec, file: str) -> list[tuple[str, dict[str, Any]]]:
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(space.gpus):
        mapping = {"name": entry} if isinstance(entry, str) else dict(entry)
        label = mapping.pop("label", None) or mapping.get("name")
        if not isinstance(label, str) or not label:
            raise ScenarioError(
                "needs a `name` (a catalog GPU or your own)", file=file, path=f"gpus.{i}"
            )
        if "tensor_parallel" in mapping:
            raise ScenarioError(
                "set degrees in the space's tensor_parallel list, not per GPU",
                file=file,
                path=f"gpus.{i}.tensor_parallel",
            )
        validated(HardwareSpec, mapping, file, f"gpus.{i}")
        if label in out:
            raise ScenarioError(
                f"{label} is listed twice; give one entry a `label` of its own",
                file=file,
                path=f"gpus.{i}",
            )
        out[label] = mapping
    return list(out.items())


def tiers_name(spec: KVTiersSpec) -> str:
    """A tier option's short name: its tiers and their GiB (`dram256+remote2048`,
    `remote-unbounded`), then `eviction` and `overlap` where it departs from the defaults."""
    parts = []
    for kind, tier in spec.given():
        cap = tier.capacity_gb
        if isinstance(cap, str):
            parts.append(f"{kind}-{cap}")  # unbounded
        else:
            parts.append(f"{kind}{cap:.0f}" if cap.is_integer() else f"{kind}{cap:g}")
    modes = [m for m in (spec.write, spec.load) if m in ("eviction", "overlap")]
    return " ".join(["+".join(parts), *modes])


def _tiers(space: SpaceSpec, file: str) -> list[tuple[str | None, dict[str, Any] | None]]:
    """(name, kv_tiers mapping or None for no tiers) of every tier option; one (None, None)
    when the space lists none (the scenario's own tiers apply, unnamed)."""
    if space.kv_tiers is None:
        return [(None, None)]
    out: dict[str, dict[str, Any] | None] = {}
    for i, entry in enumerate(space.kv_tiers):
        where = f"kv_tiers.{i}"
        mapping: dict[str, Any] | None = None
        label: Any = "no tiers"
        if entry is not None:
            given = dict(entry)
            label = given.pop("label", None)
            if label is not None and (not isinstance(label, str) or not label.strip()):
                raise ScenarioError("must be a name (text)", file=file, path=f"{where}.label")
            spec = validated(KVTiersSpec, given, file, where)
            if not spec.given():
                raise ScenarioError(
                    "names no tier: give dram, nvme or remote (null for no tiers)",
                    file=file,
                    path=where,
                )
            mapping = spec.model_dump(mode="json", exclude_none=True)
            label = label or tiers_name(spec)
        if mapping in out.values():
            what = "the same tiers are" if mapping is not None else "null (no tiers) is"
            raise ScenarioError(f"{what} listed twice", file=file, path=where)
        if label in out:
            raise ScenarioError(
                f"{label} is listed twice; give one option a `label` of its own",
                file=file,
                path=where,
            )
        out[label] = mapping
    return list(out.items())


_POLICY: TypeAdapter[Any] = TypeAdapter(PolicySpec)


def _caching(policy: dict[str, Any]) -> str | None:
    """Why a tier option cannot serve with `policy` (it has no prefix caching), or None. A policy
    that does not validate passes here: it is refused with its own reason when it is checked."""
    try:
        spec = _POLICY.validate_python(policy)
    except ValidationError:
        return None
    if spec.name == "static":
        return "kv_tiers needs prefix caching, which static batching does not have"
    if not spec.prefix_caching:
        return "kv_tiers needs prefix caching: the policy does not set prefix_caching: true"
    return None


def _entries(space: SpaceSpec, base_policy: dict[str, Any]) -> list[dict[str, Any]]:
    return space.policies if space.policies is not None else [base_policy]


def check_size(space: SpaceSpec, file: str, base_policy: dict[str, Any]) -> int:
    """The number of configurations of the space, counted from the lengths of its lists before
    anything is expanded (a product of policy lists can reach millions), refused past
    `MAX_CONFIGS`; a policy value list that is empty is refused too (it would expand to none)."""
    counts = []
    for i, entry in enumerate(_entries(space, base_policy)):
        lengths = []
        for key, value in entry.items():
            if isinstance(value, list) and not value:
                where = f"policies.{i}.{key}"
                raise ScenarioError("an empty list of values: give one", file=file, path=where)
            lengths.append(len(value) if isinstance(value, list) else 1)
        counts.append(math.prod(lengths))
    num_policies = sum(counts)
    size = len(space.gpus) * len(space.tensor_parallel) * len(space.layouts) * num_policies
    tiers = ""
    if space.kv_tiers is not None:
        size *= len(space.kv_tiers)
        tiers = f" x {len(space.kv_tiers)} tier options"
    if size > MAX_CONFIGS:
        raise ScenarioError(
            f"{size} configurations ({len(space.gpus)} GPUs x {len(space.tensor_parallel)} "
            f"degrees x {len(space.layouts)} layouts x {num_policies} policies{tiers}); at most "
            f"{MAX_CONFIGS}",
            file=file,
        )
    return size


def policies(
    space: SpaceSpec, base_policy: dict[str, Any], file: str = "<space>"
) -> list[tuple[str, dict[str, Any], int]]:
    """(label, mapping, index of its entry) for every policy the entries expand to (the
    scenario's own policy when the space lists none), once `check_size` has counted them."""
    check_size(space, file, base_policy)
    out = []
    for i, entry in enumerate(_entries(space, base_policy)):
        keys = list(entry)
        values = [v if isinstance(v, list) else [v] for v in entry.values()]
        for combo in itertools.product(*values):
            policy = dict(zip(keys, combo, strict=True))
            given = [f"{SHORT.get(k, k)}={v}" for k, v in policy.items() if k != "name"]
            out.append((" ".join([str(policy.get("name")), *given]), policy, i))
    return out


def expand(
    space: SpaceSpec, file: str, model: ModelSpec, expanded: list[tuple[str, dict[str, Any], int]]
) -> Expanded:
    """Every configuration of the space (its policies `expanded` by `policies`, which counted
    them first, and checked by the caller); those that cannot run set aside with the reason."""
    gpus = _gpus(space, file)
    tiers = _tiers(space, file)
    uncached = [_caching(policy) for _, policy, _ in expanded]
    for key in ("tensor_parallel", "layouts"):
        values = getattr(space, key)
        if len(set(values)) < len(values):
            raise ScenarioError("a value is listed twice", file=file, path=key)
    configs: list[Config] = []
    aside: list[tuple[Config, str, str]] = []
    every: list[Config] = []
    for (gpu, mapping), tp, layout, k, (tiers_label, tiers_mapping) in itertools.product(
        gpus, space.tensor_parallel, space.layouts, range(len(expanded)), tiers
    ):
        policy_label, policy, _ = expanded[k]
        hardware = {**mapping, "tensor_parallel": tp}
        found = LAYOUT.fullmatch(layout)
        prefill, decode = (int(found[1]), int(found[2])) if found else (0, 0)
        ident: list[Any] = [hardware, layout, policy, gpu]
        if tiers_label is not None:  # the id of a space without kv_tiers is as it was
            ident += [tiers_mapping, tiers_label]
        config = Config(_digest(ident), gpu, hardware, tp, layout, prefill, decode, policy,
                        policy_label, tiers_mapping, tiers_label)  # fmt: skip
        every.append(config)
        try:
            check_fits(model, HardwareSpec.model_validate(hardware))
        except ValueError as exc:
            reason = str(exc).replace("hardware.tensor_parallel", "tensor_parallel")
            category = "does not fit" if "does not fit" in reason else "cannot shard"
            aside.append((config, category, reason))
            continue
        if prefill and policy.get("name") == "static":
            reason = "static batching cannot be split into prefill and decode pools"
            aside.append((config, "static P/D", reason))
            continue
        if tiers_mapping is not None and uncached[k] is not None:
            aside.append((config, "no prefix caching", str(uncached[k])))
            continue
        configs.append(config)
    return Expanded(space, file, configs, aside, every)
