"""The unit costs' keys: which GPU generation and vendor price a GPU, and how a unit cost is
named in the catalog (`sim/costs/unit_costs.yaml`) and in a step's basis
(`sim.costs.step_events`).

A key is `<kind>@<scope>`: per GPU generation (`kernel_s@hopper`), per generation and the
GEMM's dtype class or the weights' storage (`gemm_eff@blackwell/fp4`, `stream_eff@hopper/plain`),
per vendor for the collectives (`allreduce_s@nvidia`; the expert exchange also per engine where
its kernels differ: `dispatch_s@nvidia/sglang`) and per engine for the host's time
(`host_s@vllm`). A generation's kind in `HIERARCHICAL` falls back to its vendor's key
(`vendor_key`) where the fit had no deployment of that generation.
"""

from __future__ import annotations

from sim.costs.catalog import FP4_DTYPES, HardwareSpec

GENERATIONS: dict[str, str] = {
    "a100-40g": "ampere",
    "a100-80g": "ampere",
    "a40": "ampere",
    "l40s": "ada",
    "rtx-4090": "ada",
    "h100-sxm": "hopper",
    "h100-pcie": "hopper",
    "h200": "hopper",
    "b200": "blackwell",
    "gb200": "blackwell",
    "b300": "blackwell",  # Blackwell Ultra: Blackwell's unit costs (a prior, no run measured)
    "gb300": "blackwell",
    "mi300x": "cdna3",
    "mi325x": "cdna3",
    "mi355x": "cdna4",
}
VENDOR = {
    "ampere": "nvidia",
    "ada": "nvidia",
    "hopper": "nvidia",
    "blackwell": "nvidia",
    "cdna3": "amd",
    "cdna4": "amd",
}


def generation(hw: HardwareSpec) -> str:
    """The GPU generation whose unit costs price `hw` (`hopper` for a GPU the table lacks)."""
    return GENERATIONS.get(hw.name, "hopper")


def dtype_label(weight_dtype: str, compute_dtype: str) -> str:
    """The kernel class of a GEMM: its compute dtype (fp16 counts as bf16), or
    `<weights>-on-<compute>` where the weights are dequantized to a wider compute dtype (MXFP4
    on Hopper's bf16 tensor cores: W4A16 kernels, not the bf16 GEMMs of bf16 weights)."""
    weight = "bf16" if weight_dtype == "fp16" else weight_dtype
    if weight in ("bf16", compute_dtype) or (compute_dtype == "fp4" and weight in FP4_DTYPES):
        return compute_dtype
    return f"{weight}-on-{compute_dtype}"


# Engines whose expert exchange is DeepEP's low-latency kernels (SGLang's `--moe-a2a-backend
# deepep`, as Dynamo's wide-EP recipes launch it), not the engine-native all-to-all that
# TensorRT-LLM runs: their dispatch and combine are a unit cost of their own
# (`dispatch_s@<vendor>/sglang`), fitted on the prefill/decode pools that run them.
DEEPEP_ENGINES = ("sglang",)


def storage(weight_dtype: str) -> str:
    """How weights of `weight_dtype` stream: `plain` (one element per byte or two: bf16, fp16,
    fp8) or their block format (`mxfp4`, `nvfp4`, `int4`: packed 4-bit blocks with their scales,
    each read and dequantized by its own kernel family)."""
    return weight_dtype if weight_dtype in (*FP4_DTYPES, "int4") else "plain"


def unit_key(kind: str, hw: HardwareSpec, engine: str, dtype: str = "") -> str:
    """The catalog key of a unit cost: `kernel_s@hopper`, `gemm_eff@blackwell/fp4`, ..."""
    gen = generation(hw)
    if dtype == "fp16":
        dtype = "bf16"
    if kind == "dispatch_s" and engine in DEEPEP_ENGINES:
        return f"{kind}@{VENDOR[gen]}/{engine}"
    if kind in ("allreduce_s", "allreduce_peer_s", "dispatch_s"):
        return f"{kind}@{VENDOR[gen]}"
    if kind in ("host_s", "gap_s", "workers_s"):
        return f"{kind}@{engine}"
    if kind in ("gemm_eff", "stream_eff"):
        return f"{kind}@{gen}/{dtype}"
    return f"{kind}@{gen}"


# Efficiencies enter as their inverses: `inv:` keys multiply 1 / value.
INVERSE_KINDS = ("mem_eff", "stream_eff", "gemm_eff", "attn_eff")
# unit costs whose generation falls back to its vendor's fitted value (`vendor_key`)
HIERARCHICAL = frozenset(
    {"kernel_s", "mem_eff", "stream_eff", "gemm_eff", "attn_eff", "token_s"}
)


def vendor_key(key: str) -> str | None:
    """The vendor-level key a generation's unit cost falls back to (`kernel_s@hopper` ->
    `kernel_s@nvidia`, `gemm_eff@cdna3/fp8` -> `gemm_eff@amd/fp8`), or None."""
    kind, _, rest = key.partition("@")
    gen, _, dtype = rest.partition("/")
    if kind not in HIERARCHICAL or gen not in VENDOR:
        return None
    return f"{kind}@{VENDOR[gen]}" + (f"/{dtype}" if dtype else "")
