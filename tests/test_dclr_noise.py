"""DCLR's noise ascent: the closed-form gradient of L_U against autograd, and the ascent against an
autograd-based reference, in every context the trainer calls it from (grad on, no_grad, torch.compile)."""
from __future__ import annotations

import pytest
import torch
from skips import require_module

from raycse.losses.dclr import (
    dclr_noise_negatives,
    non_uniformity_gradient,
    non_uniformity_loss,
)
from raycse.losses.infonce import EPS, unit_norm


def random_inputs(n: int, k: int, h: int, seed: int, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    z1, z2 = (torch.randn(n, h, generator=gen, dtype=dtype) for _ in range(2))
    noise = torch.randn(k, h, generator=gen, dtype=dtype)
    return z1, z2, noise


def autograd_gradient(z1, z2, noise, tau_u):
    noise = noise.detach().requires_grad_(True)
    (gradient,) = torch.autograd.grad(non_uniformity_loss(z1, z2, noise, tau_u), noise)
    return gradient


def autograd_ascent(z1, z2, init, steps, beta, tau_u):
    """The ascent as it was written before the closed form: autograd's gradient of L_U at each step."""
    noise = init.detach().clone()
    for _ in range(steps):
        g = autograd_gradient(z1.detach(), z2.detach(), noise, tau_u)
        noise = noise + beta * g / g.norm(dim=1, keepdim=True).clamp_min(EPS)
    return noise


# (N, K, H): K = N, K < N and K > N (DCLR's k is a ratio, K = round(k N)), and a single anchor / noise row
SHAPES = [(8, 8, 16), (8, 3, 16), (4, 11, 7), (1, 5, 3), (6, 1, 32)]


@pytest.mark.parametrize("n, k, h", SHAPES)
@pytest.mark.parametrize("tau_u", [0.05, 1.0])
def test_closed_form_gradient_equals_autograd(n, k, h, tau_u):
    z1, z2, noise = random_inputs(n, k, h, seed=n * 100 + k)
    noise = noise * torch.linspace(0.1, 5.0, k, dtype=noise.dtype).unsqueeze(1)  # norms far from 1 matter
    expected = autograd_gradient(z1, z2, noise, tau_u)
    got = non_uniformity_gradient(unit_norm(z1), noise, tau_u)
    assert got.dtype == torch.float64 and got.shape == (k, h)
    assert expected.abs().max() > 1e-3  # a gradient that could be told from zero
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_closed_form_gradient_of_a_noise_row_below_eps_equals_autograd():
    """Below EPS the normalisation is n / EPS (linear): no projection term, as in autograd through cos_sim."""
    z1, z2, noise = random_inputs(5, 3, 4, seed=7)
    noise[1] = 1e-10 * noise[1]
    noise[2] = 0.0
    expected = autograd_gradient(z1, z2, noise, 0.5)
    got = non_uniformity_gradient(unit_norm(z1), noise, 0.5)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n, k, h", SHAPES)
def test_ascent_equals_the_autograd_reference(n, k, h):
    z1, z2, init = random_inputs(n, k, h, seed=k * 10 + n)
    for steps in (0, 1, 5):
        got = dclr_noise_negatives(z1, z2, init, steps=steps, beta=0.1, tau_u=0.05)
        expected = autograd_ascent(z1, z2, init, steps=steps, beta=0.1, tau_u=0.05)
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-11)
    assert not torch.allclose(got, init)  # five steps of 0.1 moved it


def test_ascent_in_float32_from_bfloat16_embeddings_follows_the_float64_reference():
    z1, z2, init = random_inputs(8, 4, 16, seed=3)
    got = dclr_noise_negatives(z1.bfloat16(), z2.bfloat16(), init.float(), steps=3, beta=0.05, tau_u=0.05)
    assert got.dtype == torch.float32
    # the reference on the very bf16-rounded anchors, in float64
    expected = autograd_ascent(z1.bfloat16().double(), z2.double(), init, steps=3, beta=0.05, tau_u=0.05)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)


def test_ascent_builds_no_graph_and_works_under_no_grad():
    z1, z2, init = random_inputs(6, 4, 8, seed=5, dtype=torch.float32)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    with_grad = dclr_noise_negatives(z1, z2, init, steps=2, beta=0.1, tau_u=0.05)
    assert not with_grad.requires_grad and with_grad.grad_fn is None
    with torch.no_grad():
        without_grad = dclr_noise_negatives(z1, z2, init, steps=2, beta=0.1, tau_u=0.05)
    torch.testing.assert_close(without_grad, with_grad, rtol=0, atol=0)
    assert not torch.allclose(with_grad, init)
    assert z1.grad is None and z2.grad is None


@pytest.mark.slow  # compiles the noise ascent with torch.compile
def test_ascent_under_torch_compile_equals_eager():
    require_module("torch._inductor", "torch.compile's inductor backend comes with every torch wheel CI installs")
    z1, z2, init = random_inputs(6, 3, 8, seed=11, dtype=torch.float32)
    eager = dclr_noise_negatives(z1, z2, init, steps=2, beta=0.1, tau_u=0.05)
    torch._dynamo.reset()
    compiled = torch.compile(dclr_noise_negatives, fullgraph=True)  # fullgraph: the ascent has no graph break
    with torch.no_grad():
        got = compiled(z1, z2, init, steps=2, beta=0.1, tau_u=0.05)
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-6)
