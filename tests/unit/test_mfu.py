"""MFU arithmetic: the peak table, MESHRUN_PEAK_FLOPS, FLOPs counted on the meta device."""

import math

import pytest
import torch
from torch import nn

from meshrun.errors import UsageError
from meshrun.recipes._loop import count_flops, device_peak, mfu, peak_flops
from meshrun.recipes.mlp_tp import MLP


@pytest.mark.parametrize("name, flops", [
    ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA H100 PCIe", 756e12),           # the PCIe card before the generic "H100"
    ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12),
    ("NVIDIA H800", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA L40S", 362e12),                # not the L40's 181e12
    ("NVIDIA L4", 121e12),
    ("NVIDIA A10G", 70e12),
    ("NVIDIA B200", 2.25e15),
    ("NVIDIA GB200", 2.5e15),
    ("Tesla T4", None),
])
def test_peak_by_device_name(name, flops):
    assert peak_flops(name) == flops


def test_peak_on_cpu_only_from_the_variable():
    cpu = torch.device("cpu")
    peak, why = device_peak(cpu, {})
    assert peak is None and "MESHRUN_PEAK_FLOPS" in why
    assert device_peak(cpu, {"MESHRUN_PEAK_FLOPS": " 2.5e12 "}) == (
        2.5e12, "MESHRUN_PEAK_FLOPS=2.5e12")


@pytest.mark.parametrize("raw", ["fast", "0", "-1e12", "nan", "inf", "1e12x"])
def test_bad_peak_variable_is_one_line(raw):
    with pytest.raises(UsageError) as caught:
        device_peak(torch.device("cpu"), {"MESHRUN_PEAK_FLOPS": raw})
    line = caught.value.line()
    assert line.startswith(f"meshrun: error: MESHRUN_PEAK_FLOPS={raw!r} is not a positive")
    assert "fix: " in line and "\n" not in line


def test_count_flops_of_two_linear_layers():
    """Forward 2·8·16 + 2·16·4; backward: both weight gradients, and the input
    gradient of the second layer only (the input needs none)."""
    counted = count_flops(lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
                          lambda: torch.randn(1, 8), lambda net, x: net(x).square().mean())
    forward = 2 * 8 * 16 + 2 * 16 * 4
    backward = 2 * 8 * 16 + 2 * 2 * 16 * 4
    assert counted == forward + backward == 896


def test_count_flops_of_the_mlp_recipe_is_six_per_weight():
    dim, hidden, depth = 64, 256, 2
    counted = count_flops(lambda: MLP(dim, hidden, depth), lambda: torch.randn(1, dim),
                          lambda net, x: net(x).float().square().mean())
    with torch.device("meta"):
        weights = sum(p.numel() for p in MLP(dim, hidden, depth).parameters() if p.dim() == 2)
    # 6 per weight (2 forward, 4 backward), less the first layer's input gradient
    assert counted == 6 * weights - 2 * dim * hidden == 360_448


def test_mfu_arithmetic():
    # 1 GFLOP a sample, 100 samples a step in 0.5 s on 2 devices of 1 TFLOP/s: 10 %
    assert mfu(1e9, 100, 0.5, 1e12, 2) == pytest.approx(0.1)
    assert math.isclose(mfu(3e6, 64, 0.02, 989e12, 8), 3e6 * 64 / 0.02 / (989e12 * 8))
