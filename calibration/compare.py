"""Compare fitted profiles with first principles: the roofline profile and the device probes.

For each profile: the fitted T_mem against weight bytes / bandwidth (the probed bandwidth when
the profile was measured here, else none) and against the roofline profile of the same catalog
model and GPU; the fitted T_flop against 2 * parameters / FLOP/s the same two ways; T_kv and
T_attn against the roofline. Ratios above 1 mean the hardware is slower than the estimate.

`--markdown` prints one table row per profile instead (docs/profiles.md): the step without
attention at 1 token (fixed cost) and its slope per token at small (1 to 64 tokens) and large
(1,024 to 4,096) steps, measured (a table profile's linear table, a fitted profile's
`t_mem + flop(n)`) against the roofline profile of the same model, GPU and tensor-parallel
degree.

    python -m calibration.compare PROFILE.yaml... [--hardware a100-80g] [--markdown]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from calibration.table_build import linear_seconds
from sim.costs.catalog import HARDWARE, MODELS, HardwareSpec
from sim.costs.profile import Profile, load_profile, roofline_profile
from sim.costs.tables import interpolate

# GPU names as `calibrate` slugs them (torch.cuda.get_device_name) -> catalog names
GPU_SLUGS = {
    "h200": "h200",
    "h100": "h100-sxm",
    "a100-sxm4-80gb": "a100-80g",
    "a100-80g": "a100-80g",
    "a40": "a40",
}


def _hardware(profile: Profile, override: str | None) -> str | None:
    if override:
        return override
    device = profile.provenance.get("device") or {}
    name = str(device.get("name", "")).lower().replace("nvidia ", "").replace(" ", "-")
    return next((hw for slug, hw in GPU_SLUGS.items() if name.startswith(slug)), None)


def compare(profile: Profile, hardware: str | None) -> list[tuple[str, float, float | None]]:
    """(what, fitted, estimate) rows; the estimate is None when it cannot be computed."""
    model_info: dict[str, Any] = profile.provenance.get("model") or {}
    model = MODELS.get(str(model_info.get("name")))
    c = profile.coefficients
    rows: list[tuple[str, float, float | None]] = []
    probes = (profile.provenance.get("device") or {}).get("probes") or {}
    if model is not None and probes:
        rows.append(("t_mem vs weights/probed BW", c.t_mem_s,
                     model.weight_bytes / (probes["bandwidth_gb_per_s"] * 1e9)))  # fmt: skip
        rows.append(("t_flop vs 2N/probed FLOP/s", c.t_flop_s_per_token,
                     model.flops_per_token / (probes["tflop_per_s"] * 1e12)))  # fmt: skip
    if model is not None and hardware in HARDWARE:
        roof = roofline_profile(model, HARDWARE[hardware]).coefficients
        rows += [
            ("t_mem vs roofline", c.t_mem_s, roof.t_mem_s),
            ("t_flop vs roofline", c.t_flop_s_per_token, roof.t_flop_s_per_token),
            ("t_kv vs roofline", c.t_kv_s_per_token, roof.t_kv_s_per_token),
            ("t_attn vs roofline", c.t_attn_s_per_token2, roof.t_attn_s_per_token2),
        ]
        if c.t_flop_high_s_per_token is not None:
            rows.append(("t_flop_high vs roofline", c.t_flop_high_s_per_token,
                         roof.t_flop_s_per_token))  # fmt: skip
    return rows


def linear_part(profile: Profile, n: int) -> float | None:
    """Seconds of a step of n tokens without attention: the linear table, or t_mem + flop(n)."""
    if profile.table is not None:
        t = profile.table.linear
        return interpolate(t.tokens, t.seconds, n) if t.tokens[0] <= n <= t.tokens[-1] else None
    return linear_seconds(profile.coefficients, profile.analytic_form, [n])[0]


SIZES = {"fixed (1 token)": (1, None), "slope 1-64": (1, 64), "slope 1k-4k": (1024, 4096)}


def roofline_ratios(profile: Profile, hardware: str | None) -> dict[str, tuple[float, float]]:
    """(measured, roofline) fixed cost and per-token slopes, where both exist."""
    model = MODELS.get(str((profile.provenance.get("model") or {}).get("name")))
    if model is None or hardware not in HARDWARE:
        return {}
    hw: HardwareSpec = HARDWARE[hardware]
    tp = int((profile.provenance.get("device") or {}).get("tensor_parallel", 1))
    roof = roofline_profile(model, hw.with_tensor_parallel(tp) if tp > 1 else hw)
    out = {}
    for what, (a, b) in SIZES.items():
        got = [linear_part(profile, n) for n in (a, b or a)]
        ref = [linear_part(roof, n) for n in (a, b or a)]
        if None in got or None in ref:
            continue
        g0, g1 = float(got[0] or 0.0), float(got[1] or 0.0)
        r0, r1 = float(ref[0] or 0.0), float(ref[1] or 0.0)
        out[what] = (g0, r0) if b is None else ((g1 - g0) / (b - a), (r1 - r0) / (b - a))
    return out


def markdown(paths: list[Path], hardware: str | None) -> str:
    head = "| profile | form | " + " | ".join(f"{w}: measured / roofline" for w in SIZES) + " |"
    lines = [head, "|" + "---|" * (2 + len(SIZES))]
    for path in paths:
        profile = load_profile(path)
        ratios = roofline_ratios(profile, _hardware(profile, hardware))
        cells = []
        for what in SIZES:
            if what not in ratios:
                cells.append("-")
                continue
            got, ref = ratios[what]
            unit, scale = ("ms", 1e3) if what.startswith("fixed") else ("us", 1e6)
            cells.append(f"{got * scale:.3g} / {ref * scale:.3g} {unit} = **{got / ref:.2f}x**")
        lines.append(f"| `{path}` | {profile.model_form} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fitted profiles vs roofline and probes.")
    parser.add_argument("profiles", nargs="+", type=Path)
    parser.add_argument("--hardware", choices=sorted(HARDWARE), help="catalog GPU to compare with")
    parser.add_argument("--markdown", action="store_true", help="one table row per profile")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(args.profiles, args.hardware))
        return 0
    for path in args.profiles:
        profile = load_profile(path)
        fit = profile.fit
        errors = "no fit"
        if fit is not None:
            held = fit.heldout_max_rel_error
            errors = f"R2 {fit.r2:.4f}, max rel err {fit.max_rel_error:.1%}, held-out " + (
                "-" if held is None else f"{held:.1%}"
            )
        print(f"{path}: {profile.model_form} ({errors})")
        for what, fitted, estimate in compare(profile, _hardware(profile, args.hardware)):
            ratio = f"{fitted / estimate:7.2f}x" if estimate else "      -"
            est = f"{estimate:.4g}" if estimate is not None else "-"
            print(f"  {what:<28} fitted {fitted:<11.4g} estimate {est:<11} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
