"""Profile files: round trip, schema errors with key paths, resolution, roofline files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.costs.catalog import HARDWARE, MODELS
from sim.costs.profile import (
    HOST_STEP_S,
    ROOFLINE_FLOP_EFFICIENCY,
    ROOFLINE_MEM_EFFICIENCY,
    Profile,
    load_profile,
    resolve_profile,
    roofline_profile,
    save_profile,
    write_roofline_profiles,
)
from sim.errors import ScenarioError

ROOFLINE_DIR = Path(__file__).resolve().parents[2] / "calibration" / "profiles" / "roofline"
MODEL, HW = MODELS["llama-3-8b"], HARDWARE["h100-sxm"]


def measured(**coefficients: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "measured-test",
        "source": "measured",
        "model_form": "extended",
        "coefficients": {"t_mem_s": 0.005, "t_flop_s_per_token": 2e-5, **coefficients},
        "provenance": {"device": "h100-sxm", "torch": "2.3.0"},
        "fit": {"r2": 0.998, "max_rel_error": 0.04, "num_points": 120, "grid": "B 1..256"},
    }


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_round_trip(tmp_path: Path) -> None:
    profile = Profile.model_validate(measured(t_kv_s_per_token=3e-8))
    path = tmp_path / "sub" / "p.yaml"
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded == profile
    assert loaded.fit is not None and loaded.fit.num_points == 120
    assert loaded.fit.model_extra == {"grid": "B 1..256"}  # extra fit keys survive
    assert [p.name for p in path.parent.iterdir()] == ["p.yaml"]  # no temp file left behind


@pytest.mark.parametrize(
    ("edit", "key_path", "reason"),
    [
        (lambda d: d["coefficients"].update(t_mem_s=-1), "coefficients.t_mem_s", "must be >= 0"),
        (
            lambda d: d["coefficients"].pop("t_flop_s_per_token"),
            "coefficients.t_flop_s_per_token",
            "required",
        ),
        (
            lambda d: d["coefficients"].update(t_memory=1),
            "coefficients.t_memory",
            "unknown key (did you mean t_mem_s?)",
        ),
        (
            lambda d: d["coefficients"].update(t_mem_s=float("inf")),
            "coefficients.t_mem_s",
            "finite",
        ),
        (
            lambda d: d["coefficients"].update(t_mem_s=float("nan")),
            "coefficients.t_mem_s",
            "finite",
        ),
        (lambda d: d["coefficients"].update(t_mem_s=True), "coefficients.t_mem_s", "number"),
        (lambda d: d.update(source="guessed"), "source", "measured"),
        (lambda d: d.update(schema_version=2), "schema_version", "1"),
        (lambda d: d.update(model_form="two_regime"), "coefficients.ridge_tokens", "required"),
        (
            lambda d: d["coefficients"].update(ridge_tokens=300),
            "coefficients.ridge_tokens",
            "only allowed",
        ),
        (lambda d: d.update(model_form="seed"), "coefficients.t_kv_s_per_token", "must be 0"),
    ],
)
def test_schema_errors_name_the_key(tmp_path: Path, edit: Any, key_path: str, reason: str) -> None:
    data = measured(t_kv_s_per_token=3e-8)
    edit(data)
    path = write(tmp_path, data)
    with pytest.raises(ScenarioError) as info:
        load_profile(path)
    assert info.value.file == str(path)
    assert info.value.path == key_path
    assert reason in info.value.reason


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not found") as info:
        load_profile(tmp_path / "missing.yaml")
    assert info.value.file == str(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("coefficients: [1, 2\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml:2:1: expected ',' or '\]'"):
        load_profile(bad)
    with pytest.raises(ScenarioError, match="mapping"):
        load_profile(write(tmp_path, [1, 2]))


def test_roofline_coefficients_by_hand() -> None:
    c = roofline_profile(MODEL, HW).coefficients
    bw = 3.35e12 * ROOFLINE_MEM_EFFICIENCY
    flops = 989e12 * ROOFLINE_FLOP_EFFICIENCY
    assert c.t_mem_s == pytest.approx(8_030_261_248 * 2 / bw + HOST_STEP_S, rel=1e-12)
    assert c.t_flop_s_per_token == pytest.approx(2 * 8_030_261_248 / flops, rel=1e-12)
    assert c.t_kv_s_per_token == pytest.approx(131_072 / bw, rel=1e-12)
    assert c.t_attn_s_per_token2 == pytest.approx(4 * 32 * 32 * 128 / flops, rel=1e-12)
    assert roofline_profile(MODEL, HW).provenance["efficiency"]["mem"] == ROOFLINE_MEM_EFFICIENCY


def test_resolve_profile_forms(tmp_path: Path) -> None:
    assert resolve_profile("roofline", MODEL, HW, tmp_path) == roofline_profile(MODEL, HW)
    write(tmp_path, measured())
    assert resolve_profile("p.yaml", MODEL, HW, tmp_path).source == "measured"
    inline = resolve_profile(
        {"coefficients": {"t_mem_s": 0.01, "t_flop_s_per_token": 1e-5}}, MODEL, HW, tmp_path
    )
    assert (inline.source, inline.model_form) == ("inline", "extended")
    two = resolve_profile(
        {
            "coefficients": {
                "t_mem_s": 0.01,
                "t_flop_s_per_token": 0.0,
                "ridge_tokens": 256,
                "t_flop_high_s_per_token": 4e-5,
            }
        },
        MODEL,
        HW,
        tmp_path,
    )
    assert two.model_form == "two_regime"
    with pytest.raises(ScenarioError) as info:
        resolve_profile(
            {"coefficients": {"t_mem_s": "fast", "t_flop_s_per_token": 0}},
            MODEL,
            HW,
            tmp_path,
            key="instance.profile",
        )
    assert info.value.path == "instance.profile.coefficients.t_mem_s"
    with pytest.raises(ScenarioError, match="not found"):
        resolve_profile("nope.yaml", MODEL, HW, tmp_path)


def test_committed_roofline_files_are_current(tmp_path: Path) -> None:
    written = write_roofline_profiles(tmp_path)
    names = sorted(p.name for p in written)
    assert names == sorted(p.name for p in ROOFLINE_DIR.glob("*.yaml"))
    assert "llama-3-70b_a100-80g.yaml" not in names  # weights alone exceed the GPU ...
    assert "llama-3-70b_a100-80g_tp2.yaml" in names  # ... so the file is for two of them
    assert "llama-3-70b_b200.yaml" in names  # one B200 holds it
    assert "mixtral-8x7b_h200.yaml" in names and "mixtral-8x7b_l40s_tp4.yaml" in names
    # every pair fits at tp 8 or less but these: DeepSeek-V3 (fp8) and Llama-4 Maverick need
    # more than eight GPUs of 80 GB or less, Qwen3-235B more than eight of 48 GB or less, and
    # eight RTX 4090s (24 GB) hold neither Llama-4 Scout nor Mixtral-8x22B
    small = ("a100-40g", "a100-80g", "a40", "h100-sxm", "h100-pcie", "l40s", "rtx-4090")
    unfit = {(m, g) for m in ("deepseek-v3", "llama-4-maverick") for g in small}
    unfit |= {("qwen3-235b-a22b", g) for g in ("a100-40g", "a40", "l40s", "rtx-4090")}
    unfit |= {("llama-4-scout", "rtx-4090"), ("mixtral-8x22b", "rtx-4090")}
    # Kimi-K2 (1T, fp8) and GLM-4.5 (355B, bf16) need more than eight of 80 GB or less too, and
    # GLM-4.5-Air (106B) more than eight RTX 4090s
    unfit |= {(m, g) for m in ("kimi-k2", "glm-4.5") for g in small}
    unfit |= {("glm-4.5-air", "rtx-4090")}
    fitted = {tuple(name.removesuffix(".yaml").split("_")[:2]) for name in names}
    assert fitted == {(m, g) for m in MODELS for g in HARDWARE} - unfit
    assert len(names) == len(MODELS) * len(HARDWARE) - 35
    for path in written:
        assert load_profile(ROOFLINE_DIR / path.name) == load_profile(path), path.name


def test_roofline_regeneration_is_byte_identical(tmp_path: Path) -> None:
    first = write_roofline_profiles(tmp_path / "a")
    second = write_roofline_profiles(tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
