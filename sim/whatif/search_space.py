"""A deployment search space: which GPUs, degrees of parallelism, layouts, policies and KV tiers
to try.

The space is a YAML file (or a mapping) read as strictly as a scenario:

    gpus: [a100-80g, h100-sxm, {name: h200, usd_per_gpu_hour: 3.5}]  # catalog names or mappings
    tensor_parallel: [1, 2, 4, 8]          # GPUs per attention rank (default: these four)
    data_parallel: [1, 8]                  # attention ranks per instance (default: [1])
    expert_parallel: [false, true]         # true: whole experts on every GPU (default: [false])
    pipeline_parallel: [1, 2, 4]           # stages per instance (default: [1])
    layouts: [colocated, 1p1d, 1p2d]       # colocated, or xPyD: x prefill per y decode instances
      # or a mapping giving a pool its own parallelism (sim/whatif/search_layouts.py):
      # {prefill: 1, decode: 1, decode_hardware: {data_parallel: 32, expert_parallel: true}}
      # (a pool's mapping takes tensor_parallel, data_parallel, expert_parallel,
      # pipeline_parallel)
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

A GPU entry takes any hardware field (price, power and the scale-out network included) but the
degrees, and an optional `label` that names it in the results (to offer one GPU at two prices).
A `kv_tiers` option is null (no tiers) or a scenario's `kv_tiers` mapping
(`sim.scenario.kv_tiers`), named in the results by its tiers (`dram256+remote2048`, `no tiers`;
`eviction` and `overlap` when it says so) or by its own `label`; its rent joins the fleet's
dollars per hour. Without the key every configuration keeps the scenario's own tiers and its
label says nothing of them.

Mixture-of-experts models (sim/costs/parallel.py): an instance has `data_parallel` attention
ranks of `tensor_parallel` GPUs each, tp x dp GPUs behind one set of expert layers, which are
split by tensor over them (`expert_parallel: false`) or held whole, num_experts / (tp x dp) on
every GPU (`true`). Pipeline parallelism (sim/costs/pipeline.py), for any model: an instance of
`pipeline_parallel` (pp) stages of tp x dp GPUs each, every stage a share of the layers, runs as
pp virtual engines. Every GPU count (an instance's, a unit's, the fleet's, its dollars) counts
tp x dp x pp per instance (`HardwareSpec.num_gpus`). A configuration is named `h200 tp1 dp8 ep8
| 1p1d[P tp8 / D dp32 ep32] | <policy>`, `h100-sxm tp4 pp2 | colocated | <policy>`: data
parallelism and pipeline stages where they are above one, expert parallelism where the axis is
true.

A configuration is one GPU, one degree (tensor, data, expert and pipeline parallel), one layout,
one policy and one tier option; the space is their product. Configurations that cannot run are
set aside here, before anything is simulated, with the reason `check_fits` gives: the model does
not fit the GPUs at that degree (`does not fit`), the degree cannot shard it (`cannot shard`:
heads or experts that do not divide, more stages than the model has layers, a missing link
figure), data or expert parallelism of a dense model (`dense model`), an instance wider than one
scale-up domain on a GPU without a scale-out network (`no scale-out network`); static batching
asked to split into prefill and decode pools; a tier option meeting a policy without prefix
caching (a tier holds blocks by content hash); KV tiers (a tier option, or the scenario's own
where the space lists none) meeting pipeline stages (`pipeline with tiers`: not modelled, each
virtual engine would get the instance's tiers); a configuration that deploys the very fleets of
an earlier one (`duplicate`: expert parallelism on one GPU, or a layout whose pools both have
their own parallelism, met again at another axis value). Tier options and duplicates are set
aside rather than refused, so that one space can weigh a policy without caching (and no tiers)
against caching with tiers, or pipeline stages against tiers, and lists axes that only some
layouts use. Every other problem (a bad key or value) is an error naming the space file and the
key.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, Strict, TypeAdapter, ValidationError

from sim.costs.catalog import HardwareSpec, ModelSpec
from sim.costs.fits import check_fits
from sim.errors import ScenarioError
from sim.inputs.messages import as_error, problems
from sim.inputs.strict_model import StrictModel
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import read_text
from sim.scenario.kv_tiers import KVTiersSpec
from sim.scenario.schema import LinkSpec, PolicySpec, RouterName
from sim.whatif.search_config import Config, deployment, digest
from sim.whatif.search_layouts import (
    LAYOUT,
    ROLES,
    Layout,
    SplitLayout,
    check_layout,
    parallel_hardware,
)

MAX_CONFIGS = 5000
# short names of policy limits in a configuration's label
SHORT = {"max_num_seqs": "seqs", "max_num_batched_tokens": "budget",
         "max_batch_size": "batch", "max_prefill_seqs": "prefills"}  # fmt: skip


class SpaceSpec(StrictModel):
    gpus: list[str | dict[str, Any]] = Field(min_length=1)
    tensor_parallel: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default=[1, 2, 4, 8], min_length=1
    )
    data_parallel: list[Annotated[int, Field(ge=1, le=1024)]] = Field(default=[1], min_length=1)
    expert_parallel: list[Annotated[bool, Strict()]] = Field(default=[False], min_length=1)
    pipeline_parallel: list[Annotated[int, Field(ge=1, le=64)]] = Field(default=[1], min_length=1)
    layouts: list[Annotated[Any, AfterValidator(check_layout)]] = Field(
        default=["colocated"], min_length=1
    )
    policies: list[dict[str, Any]] | None = Field(default=None, min_length=1)
    kv_tiers: list[dict[str, Any] | None] | None = Field(default=None, min_length=1)
    router: RouterName | None = None
    link: LinkSpec | None = None
    max_instances: int = Field(default=64, ge=1, le=4096)


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
    spec = validated(SpaceSpec, raw, file, "")
    read_layouts(spec, file)  # a layout mapping's keys, checked before anything is counted
    return spec, file


def validated(kind: type[BaseModel], data: Any, file: str, prefix: str) -> Any:
    """`kind` validated from `data`; its problems as one ScenarioError under the key `prefix`."""
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        found = problems(exc, kind)
        named = [(".".join(p for p in (prefix, path) if p), why) for path, why in found]
        raise as_error(named, file) from None


def _gpus(space: SpaceSpec, file: str) -> list[tuple[str, dict[str, Any]]]:
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(space.gpus):
        mapping = {"name": entry} if isinstance(entry, str) else dict(entry)
        label = mapping.pop("label", None) or mapping.get("name")
        if not isinstance(label, str) or not label:
            raise ScenarioError(
                "needs a `name` (a catalog GPU or your own)", file=file, path=f"gpus.{i}"
            )
        for key in ("tensor_parallel", "data_parallel", "expert_parallel", "pipeline_parallel"):
            if key in mapping:
                raise ScenarioError(
                    f"set degrees in the space's {key} list, not per GPU",
                    file=file,
                    path=f"gpus.{i}.{key}",
                )
        # expert_imbalance is checked against each degree's expert_parallel (set aside there)
        validated(HardwareSpec, {**mapping, "expert_imbalance": None}, file, f"gpus.{i}")
        if mapping.get("expert_imbalance") is not None:
            widest = {**mapping, "data_parallel": 1024, "expert_parallel": 1024}
            validated(HardwareSpec, widest, file, f"gpus.{i}")
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
    axes = ""
    for key, what in (("data_parallel", "data-parallel degrees"),
                      ("expert_parallel", "expert-parallel options"),
                      ("pipeline_parallel", "pipeline-parallel degrees")):  # fmt: skip
        if key in space.model_fields_set:  # named only where the space lists it
            size *= len(getattr(space, key))
            axes += f" x {len(getattr(space, key))} {what}"
    tiers = ""
    if space.kv_tiers is not None:
        size *= len(space.kv_tiers)
        tiers = f" x {len(space.kv_tiers)} tier options"
    if size > MAX_CONFIGS:
        raise ScenarioError(
            f"{size} configurations ({len(space.gpus)} GPUs x {len(space.tensor_parallel)} "
            f"degrees{axes} x {len(space.layouts)} layouts x {num_policies} policies{tiers}); "
            f"at most {MAX_CONFIGS}",
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


def read_layouts(space: SpaceSpec, file: str) -> list[Layout]:
    """The space's layouts (`sim.whatif.search_layouts`), each mapping validated (its errors
    name `layouts.<i>.<key>`); a layout listed twice (the same name: the same counts and pools)
    is refused."""
    out: list[Layout] = []
    for i, value in enumerate(space.layouts):
        if isinstance(value, str):
            found = LAYOUT.fullmatch(value)
            prefill, decode = (int(found[1]), int(found[2])) if found else (0, 0)
            layout = Layout(value, prefill, decode)
        else:
            spec = validated(SplitLayout, value, file, f"layouts.{i}")
            given = {r: p for r in ROLES if (p := getattr(spec, f"{r}_hardware")) is not None}
            name = f"{spec.prefill}p{spec.decode}d"
            if given:
                name += f"[{' / '.join(f'{r[0].upper()} {p.name}' for r, p in given.items())}]"
            roles = {role: par.hardware() for role, par in given.items()}
            layout = Layout(name, spec.prefill, spec.decode, roles)
        if any(layout.name == other.name for other in out):
            raise ScenarioError(f"{layout.name} is listed twice", file=file, path=f"layouts.{i}")
        out.append(layout)
    return out


DENSE_EXPERTS = (
    "expert_parallel needs a mixture-of-experts model ({} is dense; replicas of a dense model "
    "are separate instances: `instances: N`)"
)


def _category(reason: str) -> str:
    if "does not fit" in reason:
        return "does not fit"
    if "needs a mixture-of-experts model" in reason:
        return "dense model"
    if "scaleout_bandwidth_bytes_per_s is required" in reason:
        return "no scale-out network"
    return "cannot shard"  # heads, experts or layers that do not divide, a missing link


PIPELINE_TIERS = (
    "pipeline_parallel > 1 with kv_tiers is not modelled (each virtual engine would get the "
    "instance's tiers): {} stages meet the tiers of {}"
)


def pool_problem(model: ModelSpec, hardware: dict[str, Any]) -> tuple[str, str] | None:
    """(category, reason) when instances of `hardware` cannot serve `model` (`check_fits`'s
    reason, the degrees named as the space's keys), else None."""
    try:
        hw = HardwareSpec.model_validate(hardware)
    except ValidationError as exc:  # expert_imbalance above expert_parallel, ep above 1024
        found = problems(exc, HardwareSpec)
        return "cannot shard", "; ".join(f"{k}: {why}" if k else why for k, why in found)
    try:
        check_fits(model, hw)
    except ValueError as exc:
        reason = re.sub(r"hardware\.(tensor|data|expert|pipeline)_parallel", r"\1_parallel",
                        str(exc))  # fmt: skip
        return _category(reason), reason
    if not model.is_moe and "expert_parallel" in hardware:  # asked for on one GPU
        return "dense model", DENSE_EXPERTS.format(model.name)
    return None


def _problem(
    model: ModelSpec, config: Config, uncached: str | None, scenario_tiers: bool
) -> tuple[str, str] | None:
    """Why `config` cannot run (category, reason), or None: each hardware its pools use, then
    static batching split into pools, then a tier option without prefix caching, then KV tiers
    (the option's, or the scenario's own where the space lists none) with pipeline stages."""
    pools: list[tuple[str, dict[str, Any]]] = []
    if not config.prefill or None in (config.prefill_hardware, config.decode_hardware):
        pools.append(("", config.hardware))
    for role in ROLES if config.prefill else ():
        own = config.prefill_hardware if role == "prefill" else config.decode_hardware
        if own is not None:
            pools.append((f"{role} pool: ", own))
    for prefix, hardware in pools:
        found = pool_problem(model, hardware)
        if found is not None:
            return found[0], prefix + found[1]
    if config.prefill and config.policy.get("name") == "static":
        return "static P/D", "static batching cannot be split into prefill and decode pools"
    if config.kv_tiers is not None and uncached is not None:
        return "no prefix caching", uncached
    stages = max(int(hw.get("pipeline_parallel", 1)) for _, hw in config.unit_pools())
    tiered = config.kv_tiers is not None or (config.tiers_label is None and scenario_tiers)
    if stages > 1 and tiered:
        whose = (f"the space's option {config.tiers_label}" if config.kv_tiers is not None
                 else "the scenario")  # fmt: skip
        return "pipeline with tiers", PIPELINE_TIERS.format(stages, whose)
    return None


def expand(
    space: SpaceSpec,
    file: str,
    model: ModelSpec,
    expanded: list[tuple[str, dict[str, Any], int]],
    scenario_tiers: bool = False,
) -> Expanded:
    """Every configuration of the space (its policies `expanded` by `policies`, which counted
    them first, and checked by the caller); those that cannot run set aside with the reason.
    `scenario_tiers`: the scenario's own kv_tiers name a tier (they apply where the space lists
    no tier options, and refuse pipeline stages)."""
    gpus = _gpus(space, file)
    tiers = _tiers(space, file)
    layouts = read_layouts(space, file)
    uncached = [_caching(policy) for _, policy, _ in expanded]
    for key in ("tensor_parallel", "data_parallel", "expert_parallel", "pipeline_parallel"):
        values = getattr(space, key)
        if len(set(values)) < len(values):
            raise ScenarioError("a value is listed twice", file=file, path=key)
    configs: list[Config] = []
    aside: list[tuple[Config, str, str]] = []
    every: list[Config] = []
    seen: dict[str, str] = {}  # deployment -> the label of the first configuration with it
    product = itertools.product(gpus, space.tensor_parallel, space.data_parallel,
                                space.expert_parallel, space.pipeline_parallel, layouts,
                                range(len(expanded)), tiers)  # fmt: skip
    for (gpu, mapping), tp, dp, ep, pp, layout, k, (tiers_label, tiers_mapping) in product:
        policy_label, policy, _ = expanded[k]
        hardware = {**mapping, **parallel_hardware(tp, dp, ep, pp)}
        roles = {role: {**mapping, **par} for role, par in layout.roles.items()}
        ident: list[Any] = [hardware, layout.name, policy, gpu]
        if roles:  # the id of a layout without pools of their own is as it was
            ident.append(roles)
        if tiers_label is not None:  # the id of a space without kv_tiers is as it was
            ident += [tiers_mapping, tiers_label]
        config = Config(digest(ident), gpu, hardware, tp, layout.name, layout.prefill,
                        layout.decode, policy, policy_label, tiers_mapping, tiers_label, dp, ep,
                        roles.get("prefill"), roles.get("decode"), pp)  # fmt: skip
        every.append(config)
        found = _problem(model, config, uncached[k], scenario_tiers)
        if found is not None:
            aside.append((config, *found))
            continue
        key = deployment(config)
        if key in seen:
            aside.append((config, "duplicate", f"the same fleets as {seen[key]}"))
            continue
        seen[key] = config.label
        configs.append(config)
    return Expanded(space, file, configs, aside, every)
