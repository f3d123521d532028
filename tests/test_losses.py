"""The losses against values worked out by hand, their gradients, invariances, precision and the registry.

Expected values are computed here in plain Python (math, lists and loops) from each issue-3 formula, never
by calling the code under test; a few are closed forms on one-hot vectors whose cosines are 0 or 1.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch

from raycse import losses
from raycse.errors import ConfigError
from raycse.losses import (
    Embeddings,
    barlow_twins,
    build_loss,
    cos_sim,
    dcl,
    dclr_noise_negatives,
    debiased_info_nce,
    false_negative_weights,
    focal_info_nce,
    hardest_in_batch_negatives,
    info_nce,
    loss_hyperparameters,
    non_uniformity_loss,
    off_dropout_info_nce,
    triplet,
)

# Four sentences, H = 3. Z3 doubles as hard negatives, dropout-off embeddings, or noise negatives.
Z1 = [[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-1.0, 2.0, 0.0], [0.0, 1.0, 1.0]]
Z2 = [[1.0, 0.5, 2.0], [0.0, -1.0, 1.5], [-1.0, 1.5, 0.5], [0.5, 1.0, 1.0]]
Z3 = [[2.0, 1.0, -1.0], [1.0, 1.0, 1.0], [0.0, -1.0, 2.0], [1.0, 0.0, 0.5]]
ALPHA = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]


def t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def approx(expected):
    """Agreement to float32 precision: a loss near 0 is a difference of logits near 1/tau, hence the abs."""
    return pytest.approx(expected, rel=1e-5, abs=1e-6)


# ---- plain-Python references -------------------------------------------------------------------------


def ref_cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def ref_log_sum_exp(xs):
    return math.log(sum(math.exp(x) for x in xs))


def ref_info_nce(z1, z2, tau, hard_neg=None, w=0.0):
    total = 0.0
    for i in range(len(z1)):
        logits = [ref_cos(z1[i], z2[j]) / tau for j in range(len(z2))]
        if hard_neg is not None:
            logits += [ref_cos(z1[i], hard_neg[j]) / tau + (w if j == i else 0.0) for j in range(len(hard_neg))]
        total += -logits[i] + ref_log_sum_exp(logits)
    return total / len(z1)


def ref_focal(z1, z2, tau, m):
    total = 0.0
    for i in range(len(z1)):
        positive = ref_cos(z1[i], z2[i]) ** 2 / tau
        negatives = []
        for j in range(len(z2)):
            if j != i:
                s = ref_cos(z1[i], z2[j])
                negatives.append(s * (s + m) / tau)
        total += -positive + ref_log_sum_exp([positive] + negatives)
    return total / len(z1)


def ref_off_dropout(z1, z2, z0, tau, m, pos_ratio=1.0):
    total = 0.0
    for i in range(len(z1)):
        positive = pos_ratio * ref_cos(z1[i], z2[i]) / tau
        negatives = sum(math.exp(ref_cos(z0[i], z0[j]) / tau) for j in range(len(z0)) if j != i)
        total += -positive + math.log(math.exp(positive) + m * negatives)
    return total / len(z1)


def ref_correlation(z1, z2):
    """Pearson correlation between column c of z1 and column d of z2, by loops."""
    n, h = len(z1), len(z1[0])

    def centred_column(z, c):
        mean = sum(z[i][c] for i in range(n)) / n
        return [z[i][c] - mean for i in range(n)]

    corr = [[0.0] * h for _ in range(h)]
    for c in range(h):
        for d in range(h):
            x, y = centred_column(z1, c), centred_column(z2, d)
            corr[c][d] = sum(a * b for a, b in zip(x, y)) / math.sqrt(sum(a * a for a in x) * sum(b * b for b in y))
    return corr


def ref_dcl(z1, z2, tau_dcl):
    corr = ref_correlation(z1, z2)
    h = len(corr)
    return sum(-corr[c][c] / tau_dcl + ref_log_sum_exp([corr[c][d] / tau_dcl for d in range(h)]) for c in range(h)) / h


def ref_barlow(z1, z2, lambda_bt):
    corr = ref_correlation(z1, z2)
    h = len(corr)
    on = sum((1 - corr[c][c]) ** 2 for c in range(h))
    off = sum(corr[c][d] ** 2 for c in range(h) for d in range(h) if d != c)
    return on + lambda_bt * off


def ref_debiased(z1, z2, noise, alpha, tau):
    total = 0.0
    for i in range(len(z1)):
        p = ref_cos(z1[i], z2[i]) / tau
        denominator = math.exp(p)
        denominator += sum(alpha[i][j] * math.exp(ref_cos(z1[i], z2[j]) / tau) for j in range(len(z2)) if j != i)
        denominator += sum(math.exp(ref_cos(z1[i], n) / tau) for n in noise)
        total += -p + math.log(denominator)
    return total / len(z1)


def ref_triplet(anchor, pos, neg, margin):
    def unit(v):
        norm = math.sqrt(sum(x * x for x in v))
        return [x / norm for x in v]

    def squared_distance(u, v):
        return sum((x - y) ** 2 for x, y in zip(unit(u), unit(v)))

    gaps = [squared_distance(a, p) - squared_distance(a, n) + margin for a, p, n in zip(anchor, pos, neg)]
    return sum(max(0.0, g) for g in gaps) / len(gaps)


def ref_non_uniformity(z1, z2, noise, tau_u):
    return sum(
        -ref_cos(a, b) / tau_u + ref_log_sum_exp([ref_cos(a, n) / tau_u for n in noise]) for a, b in zip(z1, z2)
    ) / len(z1)


def ref_ascent_step(z1, noise, beta, tau_u):
    """One step n <- n + beta g/||g|| with g = dL_U/dn worked out by hand:
    d s(a, n)/dn = a/(|a||n|) - s(a, n) n/|n|^2, weighted by row i's softmax over the noise, / (tau_u N)."""
    n_rows, dim = len(z1), len(noise[0])
    new_noise = []
    for k, n in enumerate(noise):
        norm_n = math.sqrt(sum(x * x for x in n))
        g = [0.0] * dim
        for a in z1:
            norm_a = math.sqrt(sum(x * x for x in a))
            exps = [math.exp(ref_cos(a, other) / tau_u) for other in noise]
            softmax = exps[k] / sum(exps)
            s = ref_cos(a, n)
            for d in range(dim):
                g[d] += softmax / (tau_u * n_rows) * (a[d] / (norm_a * norm_n) - s * n[d] / norm_n**2)
        norm_g = math.sqrt(sum(x * x for x in g))
        new_noise.append([x + beta * gx / norm_g for x, gx in zip(n, g)])
    return new_noise


# ---- hand-computed values ----------------------------------------------------------------------------


def test_info_nce_on_one_hot_vectors():
    # Cosines are 1 on the diagonal and 0 elsewhere: l_i = -1/tau + log(e^(1/tau) + N - 1).
    eye = torch.eye(3)
    assert info_nce(eye, eye, tau=0.5).item() == approx(-2 + math.log(math.e**2 + 2))
    # Hard negative -e_i: cosine -1 with its own anchor, 0 with the others, plus the weight on (i, N + i).
    expected = -2 + math.log(math.e**2 + 4 + math.exp(-2 + 0.7))
    assert info_nce(eye, eye, tau=0.5, hard_neg=-eye, hard_neg_weight=0.7).item() == approx(expected)


def test_info_nce_matches_hand_computation():
    assert info_nce(t(Z1), t(Z2), tau=0.1).item() == approx(ref_info_nce(Z1, Z2, 0.1))
    got = info_nce(t(Z1), t(Z2), tau=0.1, hard_neg=t(Z3), hard_neg_weight=-0.4).item()
    assert got == approx(ref_info_nce(Z1, Z2, 0.1, Z3, -0.4))


def test_focal_info_nce():
    # z1 = (e1, e2), z2 = (e1 + e2, e2): s_11 = s_21 = 1/sqrt2, s_12 = 0, s_22 = 1. tau = 0.5, m = 0.3.
    z1, z2 = t([[1.0, 0.0], [0.0, 1.0]]), t([[1.0, 1.0], [0.0, 1.0]])
    row1 = -1 + math.log(math.e + 1)  # positive 0.5/tau, negative 0 * (0 + m)/tau
    row2 = -2 + math.log(math.e**2 + math.exp((0.5 + 0.3 / math.sqrt(2)) / 0.5))
    assert focal_info_nce(z1, z2, tau=0.5, m=0.3).item() == approx((row1 + row2) / 2)
    assert focal_info_nce(t(Z1), t(Z2), tau=0.07, m=0.3).item() == approx(ref_focal(Z1, Z2, 0.07, 0.3))


def test_off_dropout_info_nce():
    eye = torch.eye(2)  # s(z0_i, z0_j) = 0 for j != i: l_i = -1/tau + log(e^(1/tau) + m)
    assert off_dropout_info_nce(eye, eye, eye, tau=0.5, m=0.9).item() == approx(-2 + math.log(math.e**2 + 0.9))
    got = off_dropout_info_nce(t(Z1), t(Z2), t(Z3), tau=0.05, m=0.9).item()
    assert got == approx(ref_off_dropout(Z1, Z2, Z3, 0.05, 0.9))


def test_off_dropout_pos_ratio_scales_the_positive_logit():
    # The released code: l_i = -r/tau + log(e^(r/tau) + N - 1) on one-hot vectors, r in both places.
    eye = torch.eye(2)
    got = off_dropout_info_nce(eye, eye, eye, tau=0.5, pos_ratio=0.9).item()
    assert got == approx(-1.8 + math.log(math.exp(1.8) + 1))
    both = off_dropout_info_nce(eye, eye, eye, tau=0.5, m=0.7, pos_ratio=0.9).item()
    assert both == approx(-1.8 + math.log(math.exp(1.8) + 0.7))
    got = off_dropout_info_nce(t(Z1), t(Z2), t(Z3), tau=0.05, pos_ratio=0.8).item()
    assert got == approx(ref_off_dropout(Z1, Z2, Z3, 0.05, 1.0, pos_ratio=0.8))
    got = off_dropout_info_nce(t(Z1), t(Z2), t(Z3), tau=0.1, m=1.3, pos_ratio=1.2).item()
    assert got == approx(ref_off_dropout(Z1, Z2, Z3, 0.1, 1.3, pos_ratio=1.2))


def test_off_dropout_with_neither_knob_is_the_plain_off_dropout_info_nce():
    plain = 0.0  # -s(z1_i, z2_i)/tau + log(exp(s(z1_i, z2_i)/tau) + sum_{j != i} exp(s(z0_i, z0_j)/tau))
    for i in range(4):
        logits = [ref_cos(Z1[i], Z2[i]) / 0.05] + [ref_cos(Z3[i], Z3[j]) / 0.05 for j in range(4) if j != i]
        plain += (-logits[0] + ref_log_sum_exp(logits)) / 4
    assert off_dropout_info_nce(t(Z1), t(Z2), t(Z3), tau=0.05).item() == approx(plain)
    assert off_dropout_info_nce(t(Z1), t(Z2), t(Z3), tau=0.05, m=1.0, pos_ratio=1.0).item() == approx(plain)


def _realistic_views(n: int = 16, h: int = 64, seed: int = 0):
    """Dropout views whose positive cosines lie in 0.8-0.9 and dropout-off negatives near 0.63, as a
    pre-trained encoder's do (DCLR Fig. 1; MiniLM's in-batch negatives average about 0.62, issue 13)."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randn(h, generator=gen)
    z0 = shared + 0.75 * torch.randn(n, h, generator=gen)
    z1, z2 = (z0 + 0.55 * torch.randn(n, h, generator=gen) for _ in range(2))
    return z1, z2, z0


def test_off_dropout_knobs_move_the_loss_as_documented():
    z1, z2, z0 = _realistic_views()
    positives = torch.nn.functional.cosine_similarity(z1, z2)
    negatives = cos_sim(z0, z0)[~torch.eye(16, dtype=torch.bool)]
    assert 0.75 < positives.min() and positives.max() < 0.9
    assert 0.55 < negatives.mean() < 0.7
    assert (positives > cos_sim(z0, z0).fill_diagonal_(-1).max(dim=1).values).all()  # positives the most similar

    def loss(**knobs):
        return off_dropout_info_nce(z1, z2, z0, tau=0.05, **knobs).item()

    plain = loss()
    assert loss(pos_ratio=0.9) > plain  # a smaller positive logit: a larger loss
    assert loss(pos_ratio=1.1) < plain
    assert loss(m=0.9) < plain  # lighter negatives: a smaller loss
    assert loss(m=1.1) > plain
    # The point: at tau = 0.05, 0.9 -> 1 on the positive's factor moves the logit by 0.1 s/tau ~ 1.7,
    # on the negatives' weight by log(1/0.9) ~ 0.1, so the first moves the loss more than ten times as much.
    pos_ratio_effect = loss(pos_ratio=0.9) - loss(pos_ratio=1.0)
    m_effect = loss(m=1.0) - loss(m=0.9)
    assert m_effect > 0 and pos_ratio_effect > 10 * m_effect, (pos_ratio_effect, m_effect)


def test_dcl_and_barlow_twins_on_uncorrelated_columns():
    # Two centred, orthogonal columns: C = I between z and itself, C = diag(1, -1) against z with column 2 negated.
    z = t([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])
    flipped = z * t([1.0, -1.0])
    assert dcl(z, z, tau_dcl=0.5).item() == approx(-2 + math.log(math.e**2 + 1))
    expected = ((-2 + math.log(math.e**2 + 1)) + (2 + math.log(1 + math.exp(-2)))) / 2
    assert dcl(z, flipped, tau_dcl=0.5).item() == approx(expected)
    assert barlow_twins(z, z, lambda_bt=0.3).item() == pytest.approx(0.0, abs=1e-6)
    assert barlow_twins(z, flipped, lambda_bt=0.3).item() == approx(4.0)  # (1 - (-1))^2


def test_dcl_and_barlow_twins_match_hand_computation():
    assert dcl(t(Z1), t(Z2), tau_dcl=5.0).item() == approx(ref_dcl(Z1, Z2, 5.0))
    assert dcl(t(Z1), t(Z3), tau_dcl=0.2).item() == approx(ref_dcl(Z1, Z3, 0.2))
    assert barlow_twins(t(Z1), t(Z2), lambda_bt=0.0051).item() == approx(ref_barlow(Z1, Z2, 0.0051))
    assert barlow_twins(t(Z1), t(Z3), lambda_bt=0.5).item() == approx(ref_barlow(Z1, Z3, 0.5))


def test_false_negative_weights():
    # s(c1, c2) = 1/sqrt(1.01) ~ 0.995 >= 0.9: each is the other's false negative; c3 is orthogonal-ish.
    c = t([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    expected = [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    assert false_negative_weights(c, phi=0.9).tolist() == expected
    # phi = 1 keeps every off-diagonal pair here (the unused diagonal is 1 up to rounding); phi = 0 drops every
    # pair with a cosine >= 0.
    off_diagonal = ~torch.eye(3, dtype=torch.bool)
    assert false_negative_weights(c, phi=1.0)[off_diagonal].tolist() == [1.0] * 6
    assert false_negative_weights(c, phi=0.0).sum().item() == 0.0
    expected = [[0.0 if ref_cos(a, b) >= 0.5 else 1.0 for b in Z3] for a in Z3]
    assert false_negative_weights(t(Z3), phi=0.5).tolist() == expected


def test_debiased_info_nce_removes_weight_zero_negatives():
    eye = torch.eye(3)
    weights = torch.ones(3, 3)
    weights[0, 1] = 0.0
    weights.fill_diagonal_(0.0)  # the diagonal must not touch the positive
    noise = t([[-1.0, 0.0, 0.0]])
    row0 = -2 + math.log(math.e**2 + 1 + math.exp(-2))  # j = 1 removed, j = 2 kept, noise at cosine -1
    other_rows = -2 + math.log(math.e**2 + 2 + 1)  # both negatives and the noise at cosine 0
    expected = (row0 + 2 * other_rows) / 3
    assert debiased_info_nce(eye, eye, noise, weights, tau=0.5).item() == approx(expected)
    got = debiased_info_nce(t(Z1), t(Z2), t(Z3[:2]), t(ALPHA), tau=0.05).item()
    assert got == approx(ref_debiased(Z1, Z2, Z3[:2], ALPHA, 0.05))


def test_debiased_info_nce_reduces_to_info_nce():
    no_noise = torch.empty(0, 3)
    got = debiased_info_nce(t(Z1), t(Z2), no_noise, torch.ones(4, 4), tau=0.05).item()
    assert got == approx(ref_info_nce(Z1, Z2, 0.05))


def test_triplet():
    # a = e1; p at 45 degrees: |a - p|^2 = 2 - sqrt2; n = e2: |a - n|^2 = 2; the gap -sqrt2 + 0.5 clips to 0.
    # Second: p = e2 (|a - p|^2 = 2), n ~ e1: |a - n|^2 = 2 - 2/sqrt(1.01).
    anchor, pos, neg = [[1.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.1]]
    expected = (0.0 + (2 / math.sqrt(1.01) + 0.5)) / 2
    assert triplet(t(anchor), t(pos), t(neg), margin=0.5).item() == approx(expected)
    assert triplet(t(Z1), t(Z2), t(Z3), margin=1.0).item() == approx(ref_triplet(Z1, Z2, Z3, 1.0))


def test_non_uniformity_loss():
    got = non_uniformity_loss(t(Z1), t(Z2), t(Z3), tau_u=0.05).item()
    assert got == approx(ref_non_uniformity(Z1, Z2, Z3, 0.05))


def test_noise_ascent_steps_match_hand_computation():
    init = Z3[:3]
    one = ref_ascent_step(Z1, init, beta=0.1, tau_u=0.5)
    two = ref_ascent_step(Z1, one, beta=0.1, tau_u=0.5)
    for steps, expected in ((0, init), (1, one), (2, two)):
        got = dclr_noise_negatives(t(Z1), t(Z2), t(init), steps=steps, beta=0.1, tau_u=0.5)
        torch.testing.assert_close(got, t(expected), rtol=1e-5, atol=1e-6)


def test_noise_ascent_increases_non_uniformity():
    gen = torch.Generator().manual_seed(0)
    z1, z2, noise = (torch.randn(8, 16, generator=gen) for _ in range(3))
    values = [non_uniformity_loss(z1, z2, noise, tau_u=0.05).item()]
    for _ in range(4):
        noise = dclr_noise_negatives(z1, z2, noise, steps=1, beta=0.05, tau_u=0.05)
        values.append(non_uniformity_loss(z1, z2, noise, tau_u=0.05).item())
    assert all(after > before for before, after in itertools.pairwise(values)), values


def test_noise_negatives_are_detached_constants():
    z1, z2 = t(Z1).requires_grad_(), t(Z2).requires_grad_()
    with torch.no_grad():  # the trainer may evaluate a loss under no_grad; the ascent still needs its graph
        noise = dclr_noise_negatives(z1, z2, t(Z3), steps=2, beta=0.1, tau_u=0.05)
    assert not noise.requires_grad and z1.grad is None and z2.grad is None
    assert not torch.equal(noise, t(Z3))
    empty = dclr_noise_negatives(z1, z2, torch.empty(0, 3), steps=4, beta=1e-3, tau_u=0.05)
    assert empty.shape == (0, 3)


# ---- properties shared by every pure function ----------------------------------------------------------

# Each case takes three (N, H) tensors; `kind` says which scalings leave it unchanged.
FUNCTIONS = {
    "info_nce": (lambda a, b, c: info_nce(a, b, tau=0.5), "rows"),
    "info_nce_hard_neg": (lambda a, b, c: info_nce(a, b, tau=0.5, hard_neg=c, hard_neg_weight=0.7), "rows"),
    "focal_info_nce": (lambda a, b, c: focal_info_nce(a, b, tau=0.5, m=0.3), "rows"),
    "off_dropout_info_nce": (lambda a, b, c: off_dropout_info_nce(a, b, c, tau=0.5, m=0.9), "rows"),
    "off_dropout_info_nce_pos_ratio": (
        lambda a, b, c: off_dropout_info_nce(a, b, c, tau=0.5, m=1.2, pos_ratio=0.9),
        "rows",
    ),
    "debiased_info_nce": (
        lambda a, b, c: debiased_info_nce(a, b, c[:2], false_negative_weights(c, phi=0.2), tau=0.5),
        "rows",
    ),
    "non_uniformity_loss": (lambda a, b, c: non_uniformity_loss(a, b, c, tau_u=0.5), "rows"),
    "triplet": (lambda a, b, c: triplet(a, b, c, margin=0.5), "rows"),
    "dcl": (lambda a, b, c: dcl(a, b, tau_dcl=0.5), "columns"),
    "barlow_twins": (lambda a, b, c: barlow_twins(a, b, lambda_bt=0.3), "columns"),
}


def _random_inputs(seed: int, dtype=torch.float32, n: int = 4, h: int = 3):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, h, generator=gen, dtype=torch.float64).to(dtype) for _ in range(3)]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_gradcheck_float64(name):
    fn, _ = FUNCTIONS[name]
    inputs = [x.requires_grad_() for x in _random_inputs(1, torch.float64)]
    assert fn(*inputs).dtype == torch.float64
    assert torch.autograd.gradcheck(fn, inputs)


def test_gradcheck_cos_sim():
    inputs = [x.requires_grad_() for x in _random_inputs(2, torch.float64)[:2]]
    assert torch.autograd.gradcheck(cos_sim, inputs)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_scale_invariance(name):
    fn, kind = FUNCTIONS[name]
    a, b, c = _random_inputs(3, torch.float64)
    if kind == "rows":  # cosine losses: rescaling any embedding changes nothing
        scaled = [x * torch.tensor([[0.1], [3.0], [7.0], [0.5]], dtype=x.dtype) for x in (a, b, c)]
    else:  # correlation losses: scaling and shifting any dimension changes nothing
        scaled = [x * torch.tensor([0.2, 5.0, 1.5], dtype=x.dtype) + 3.0 for x in (a, b, c)]
    torch.testing.assert_close(fn(*scaled), fn(a, b, c), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_bf16_inputs_compute_in_float32(name):
    fn, _ = FUNCTIONS[name]
    inputs = _random_inputs(4, n=8, h=16)
    rounded = [x.to(torch.bfloat16) for x in inputs]
    got = fn(*rounded)
    assert got.dtype == torch.float32
    # Upcasting is exact, so bf16 inputs give what their float32 values give ...
    torch.testing.assert_close(got, fn(*(x.float() for x in rounded)), rtol=1e-6, atol=1e-6)
    # ... which differs from the unrounded inputs only by bf16's rounding of the inputs.
    torch.testing.assert_close(got, fn(*inputs), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_bf16_autocast_does_not_lower_precision(name):
    fn, _ = FUNCTIONS[name]
    inputs = _random_inputs(5, n=8, h=16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fn(*inputs)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, fn(*inputs), rtol=1e-6, atol=1e-6)


def _assert_finite_with_finite_gradient(fn, inputs):
    inputs = [x.clone().requires_grad_() for x in inputs]
    loss = fn(*inputs)
    loss.backward()
    assert torch.isfinite(loss)
    for x in inputs:
        assert x.grad is None or torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_nan_on_duplicated_sentences(name):
    same = torch.tensor([[0.3, -1.2, 0.7]]).repeat(4, 1)  # every column constant too
    _assert_finite_with_finite_gradient(FUNCTIONS[name][0], [same, same, same])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_nan_on_constant_column_or_zero_vector(name):
    a, b, c = _random_inputs(6)
    a[:, 1] = 2.5
    b[:, 1] = 0.0
    c[0] = 0.0
    _assert_finite_with_finite_gradient(FUNCTIONS[name][0], [a, b, c])


def test_no_nan_in_noise_ascent_from_zero_vectors():
    noise = dclr_noise_negatives(torch.zeros(4, 3), t(Z2), t([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]), 4, 1e-3, 0.05)
    assert torch.isfinite(noise).all()


# ---- the registry ------------------------------------------------------------------------------------


def _embeddings(n: int = 8, h: int = 16, seed: int = 0) -> Embeddings:
    gen = torch.Generator().manual_seed(seed)
    z1, z2, z3, z0, comp = (torch.randn(n, h, generator=gen) for _ in range(5))
    return Embeddings(z1=z1.requires_grad_(), z2=z2.requires_grad_(), z3=z3, z0=z0, complementary=comp)


def test_names():
    """Read from the loss files' declarations: the default loss first, then by name."""
    assert losses.DEFAULT_LOSS == "simcse"
    assert losses.BASE_LOSSES == ("simcse", "dclr", "focal", "off-dropout", "simcse-sup", "triplet")
    assert losses.REGULARISERS == ("barlow", "dcl")
    assert losses.PRESETS == {
        "imsimcse": ("off-dropout", "dcl"),
        "simcse+barlow": ("simcse", "barlow"),
        "simcse+dcl": ("simcse", "dcl"),
    }
    assert losses.LOSS_NAMES == losses.BASE_LOSSES + ("imsimcse", "simcse+barlow", "simcse+dcl")


@pytest.mark.parametrize("reg", [None, "dcl", "barlow"])
@pytest.mark.parametrize("name", losses.LOSS_NAMES)
def test_every_loss_builds_and_trains(name, reg):
    if name in losses.PRESETS and reg not in (None, losses.PRESETS[name][1]):
        with pytest.raises(ConfigError, match="already includes regulariser"):
            build_loss(name, reg)
        return
    loss_fn = build_loss(name, reg)
    assert isinstance(loss_fn, losses.ContrastiveLoss)
    assert set(loss_fn.hparams) == set(loss_hyperparameters(name, reg))
    emb = _embeddings()
    loss = loss_fn(emb)
    assert loss.shape == () and loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(emb.z1.grad).all() and emb.z1.grad.abs().sum() > 0


def test_composed_names_flags_and_values():
    emb = _embeddings()
    imsimcse = build_loss("imsimcse")
    assert imsimcse.name == "imsimcse" and imsimcse.needs_z0
    assert not imsimcse.needs_hard_neg and not imsimcse.needs_complementary
    expected = off_dropout_info_nce(emb.z1, emb.z2, emb.z0, tau=0.05, m=1.0, pos_ratio=0.9) + 0.1 * dcl(
        emb.z1, emb.z2, tau_dcl=5.0
    )
    torch.testing.assert_close(imsimcse(emb), expected)
    eq3 = build_loss("imsimcse", m=0.8, pos_ratio=1.0)
    expected = off_dropout_info_nce(emb.z1, emb.z2, emb.z0, tau=0.05, m=0.8) + 0.1 * dcl(emb.z1, emb.z2, tau_dcl=5.0)
    torch.testing.assert_close(eq3(emb), expected)
    assert build_loss("imsimcse", reg="dcl").name == "imsimcse"

    focal_barlow = build_loss("focal", reg="barlow", **{"lambda": 0.5, "lambda_bt": 0.01, "m": 0.2})
    assert focal_barlow.name == "focal+barlow"
    expected = focal_info_nce(emb.z1, emb.z2, tau=0.07, m=0.2) + 0.5 * barlow_twins(emb.z1, emb.z2, lambda_bt=0.01)
    torch.testing.assert_close(focal_barlow(emb), expected)

    assert build_loss("simcse-sup", reg="dcl").needs_hard_neg
    assert build_loss("dclr", reg="barlow").needs_complementary
    simcse = build_loss("simcse")
    assert (simcse.name, simcse.needs_z0, simcse.needs_hard_neg, simcse.needs_complementary) == (
        "simcse",
        False,
        False,
        False,
    )


def test_simcse_presets_match_the_plain_python_formula():
    """simcse+dcl and simcse+barlow: InfoNCE plus lambda times the regulariser, each worked out by loops here, with
    the published defaults (tau 0.05, lambda 0.1, tau_dcl 5.0, lambda_bt 0.0051) and with values of our own."""
    emb = Embeddings(z1=t(Z1), z2=t(Z2), z3=None, z0=None, complementary=None)
    assert build_loss("simcse+dcl")(emb).item() == approx(ref_info_nce(Z1, Z2, 0.05) + 0.1 * ref_dcl(Z1, Z2, 5.0))
    assert build_loss("simcse+barlow")(emb).item() == approx(
        ref_info_nce(Z1, Z2, 0.05) + 0.1 * ref_barlow(Z1, Z2, 0.0051))
    chosen = build_loss("simcse+dcl", **{"tau": 0.1, "lambda": 0.7, "tau_dcl": 0.5})(emb).item()
    assert chosen == approx(ref_info_nce(Z1, Z2, 0.1) + 0.7 * ref_dcl(Z1, Z2, 0.5))
    chosen = build_loss("simcse+barlow", **{"tau": 0.2, "lambda": 0.3, "lambda_bt": 0.5})(emb).item()
    assert chosen == approx(ref_info_nce(Z1, Z2, 0.2) + 0.3 * ref_barlow(Z1, Z2, 0.5))


def test_supervised_simcse_uses_hard_negatives():
    emb = _embeddings()
    got = build_loss("simcse-sup", hard_neg_weight=0.5)(emb)
    torch.testing.assert_close(got, info_nce(emb.z1, emb.z2, tau=0.05, hard_neg=emb.z3, hard_neg_weight=0.5))
    with pytest.raises(ValueError, match="z3"):
        build_loss("simcse-sup")(Embeddings(emb.z1, emb.z2))


def test_triplet_takes_the_hardest_in_batch_negative():
    z1 = t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    z2 = t([[1.0, 0.0, 0.1], [0.0, 1.0, 0.5], [0.2, 0.9, 1.0]])
    # Cosine of z1_i with z2_j (j != i): row 0 -> z2_2 (0.2/|z2_2| vs 0), row 1 -> z2_2 (0.66 vs 0),
    # row 2 -> z2_1 (0.45 vs 0.10).
    assert hardest_in_batch_negatives(z1, z2).tolist() == [2, 2, 1]
    z2 = z2.requires_grad_()
    got = build_loss("triplet", margin=1.5)(Embeddings(z1, z2))
    expected = ref_triplet(z1.tolist(), z2.tolist(), [z2.tolist()[j] for j in (2, 2, 1)], 1.5)
    assert got.item() == approx(expected)
    got.backward()
    assert z2.grad.abs().sum() > 0
    with_z3 = build_loss("triplet")(Embeddings(t(Z1), t(Z2), z3=t(Z3)))
    assert with_z3.item() == approx(ref_triplet(Z1, Z2, Z3, 0.5))


def test_dclr_draws_its_noise_from_the_seeded_torch_generator():
    emb = _embeddings(n=6, h=16)
    hparams = {"k": 1.5, "noise_sigma": 2.0, "noise_steps": 3, "noise_beta": 1e-2, "phi": 0.3, "tau_u": 0.1}
    module = build_loss("dclr", **hparams)
    torch.manual_seed(7)
    got = module(emb)
    torch.manual_seed(7)
    init = torch.randn(9, 16) * 2.0  # K = round(1.5 * 6)
    noise = dclr_noise_negatives(emb.z1, emb.z2, init, steps=3, beta=1e-2, tau_u=0.1)
    expected = debiased_info_nce(emb.z1, emb.z2, noise, false_negative_weights(emb.complementary, 0.3), tau=0.05)
    torch.testing.assert_close(got, expected)
    torch.manual_seed(7)
    torch.testing.assert_close(module(emb), got)

    without_noise = build_loss("dclr", k=0, phi=0.3)(emb)
    weights = false_negative_weights(emb.complementary, 0.3)
    torch.testing.assert_close(without_noise, debiased_info_nce(emb.z1, emb.z2, torch.empty(0, 16), weights, 0.05))


def test_loss_hyperparameters_are_the_published_defaults():
    assert loss_hyperparameters("simcse") == {"tau": 0.05}
    assert loss_hyperparameters("simcse-sup") == {"tau": 0.05, "hard_neg_weight": 0.0}
    assert loss_hyperparameters("focal") == {"tau": 0.07, "m": 0.3}
    assert loss_hyperparameters("off-dropout") == {"tau": 0.05, "m": 1.0, "pos_ratio": 0.9}
    assert loss_hyperparameters("imsimcse") == {"tau": 0.05, "m": 1.0, "pos_ratio": 0.9, "lambda": 0.1, "tau_dcl": 5.0}
    assert loss_hyperparameters("simcse", "barlow") == {"tau": 0.05, "lambda": 0.1, "lambda_bt": 0.0051}
    assert loss_hyperparameters("triplet") == {"margin": 0.5}
    assert loss_hyperparameters("dclr") == {
        "tau": 0.05,
        "phi": 0.9,
        "k": 1.0,
        "noise_steps": 4,
        "noise_beta": 1e-3,
        "noise_sigma": 1.0,
        "tau_u": 0.05,
    }
    assert build_loss("imsimcse").hparams == loss_hyperparameters("imsimcse")


def test_hyperparameters_are_coerced():
    assert build_loss("simcse", tau=1).hparams == {"tau": 1.0}
    assert build_loss("simcse", tau=np.float32(0.25)).hparams == {"tau": 0.25}
    steps = build_loss("dclr", noise_steps=2.0).hparams["noise_steps"]
    assert steps == 2 and isinstance(steps, int)


@pytest.mark.parametrize(
    "name, reg, hparams, message",
    [
        ("focall", None, {}, ("unknown loss 'focall' (choose from simcse, dclr, focal, off-dropout, simcse-sup, "
         "triplet, imsimcse, simcse+barlow, simcse+dcl)")),
        ("simcse", "dlc", {}, "unknown regulariser 'dlc' (choose from barlow, dcl)"),
        ("focal+dcl", "barlow", {}, "loss 'focal+dcl' already includes regulariser 'dcl', so reg='barlow' conflicts"),
        ("dcl", None, {}, "'dcl' is a regulariser: add it to a loss (reg: dcl), or name the combination "
                          "('simcse+dcl')"),
        ("simcse", "focal", {}, "'focal' is a loss, not a regulariser (choose from barlow, dcl)"),
        ("imsimcse", "barlow", {}, "loss 'imsimcse' already includes regulariser 'dcl', so reg='barlow' conflicts"),
        ("simcse", None, {"m": 0.9}, "loss 'simcse' does not take hyperparameter 'm' (it takes: tau)"),
        ("simcse", None, {"lambda": 0.1}, "loss 'simcse' does not take hyperparameter 'lambda' (it takes: tau)"),
        ("simcse+dcl", None, {"lambda_bt": 0.1}, ("loss 'simcse+dcl' does not take hyperparameter 'lambda_bt' "
         "(it takes: tau, lambda, tau_dcl)")),
        ("simcse", None, {"tau": -0.1}, "tau=-0.1 is out of range: must be > 0"),
        ("simcse", None, {"tau": 0}, "tau=0 is out of range: must be > 0"),
        ("simcse", None, {"tau": math.inf}, "tau=inf is not a finite number: must be > 0"),
        ("simcse", None, {"tau": "0.05"}, "tau='0.05' is not a number: must be > 0"),
        ("simcse", None, {"tau": True}, "tau=True is not a number: must be > 0"),
        ("simcse+dcl", None, {"tau_dcl": -5.0}, "tau_dcl=-5.0 is out of range: must be > 0"),
        ("simcse+dcl", None, {"lambda": -0.1}, "lambda=-0.1 is out of range: must be >= 0"),
        ("simcse+barlow", None, {"lambda_bt": -1e-3}, "lambda_bt=-0.001 is out of range: must be >= 0"),
        ("off-dropout", None, {"m": 0.0}, "m=0.0 is out of range: must be > 0"),
        ("off-dropout", None, {"pos_ratio": 0.0}, "pos_ratio=0.0 is out of range: must be > 0"),
        ("imsimcse", None, {"pos_ratio": -0.9}, "pos_ratio=-0.9 is out of range: must be > 0"),
        ("focal", None, {"m": 1.5}, "m=1.5 is out of range: must be in [0, 1]"),
        ("focal", None, {"m": -0.1}, "m=-0.1 is out of range: must be in [0, 1]"),
        ("dclr", None, {"phi": 1.2}, "phi=1.2 is out of range: must be in [0, 1]"),
        ("dclr", None, {"k": -1}, "k=-1 is out of range: must be >= 0"),
        ("dclr", None, {"noise_steps": 2.5}, "noise_steps=2.5 is out of range: must be an integer >= 0"),
        ("dclr", None, {"noise_steps": -1}, "noise_steps=-1 is out of range: must be an integer >= 0"),
        ("dclr", None, {"noise_beta": -1e-3}, "noise_beta=-0.001 is out of range: must be >= 0"),
        ("dclr", None, {"noise_sigma": 0.0}, "noise_sigma=0.0 is out of range: must be > 0"),
        ("dclr", None, {"tau_u": -1.0}, "tau_u=-1.0 is out of range: must be > 0"),
        ("triplet", None, {"margin": -0.5}, "margin=-0.5 is out of range: must be >= 0"),
        ("simcse-sup", None, {"hard_neg_weight": math.nan},
         "hard_neg_weight=nan is not a finite number: must be finite"),
    ],
)
def test_config_errors_name_the_culprit(name, reg, hparams, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build_loss(name, reg, **hparams)


def test_loss_hyperparameters_rejects_unknown_names():
    with pytest.raises(ConfigError, match="unknown loss 'nope'"):
        loss_hyperparameters("nope")
    with pytest.raises(ConfigError, match="unknown regulariser 'l2'"):
        loss_hyperparameters("simcse", "l2")


# ---- statistics of the last forward ------------------------------------------------------------------


def _assert_device_scalars(stats):
    for name, value in stats.items():
        assert isinstance(value, torch.Tensor), name
        assert value.shape == () and value.dtype == torch.float32 and not value.requires_grad, name


@pytest.mark.parametrize("name", ["simcse", "focal", "off-dropout", "triplet", "simcse+dcl"])
def test_losses_without_statistics_report_none(name):
    loss_fn = build_loss(name)
    assert loss_fn.stats() == {}
    loss_fn(_embeddings())
    assert loss_fn.stats() == {}


def test_dclr_stats_by_hand():
    # s(c_0, c_1) ~ 0.995 >= 0.9: (0, 1) and (1, 0) removed, 2 of the 6 off-diagonal negatives.
    weights = false_negative_weights(t([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]]), phi=0.9)
    z1 = t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    noise = t([[1.0, 0.0], [-1.0, 1.0]])
    cosines = [ref_cos(a, n) for a in z1.tolist() for n in noise.tolist()]
    stats = losses.dclr.dclr_stats(z1, noise, weights, tau=0.05)
    _assert_device_scalars(stats)
    assert stats["dclr_removed_fraction"].item() == approx(2 / 6)
    assert stats["dclr_noise_logit"].item() == approx(sum(cosines) / len(cosines) / 0.05)
    # The (unused) diagonal, 0 here, does not count as a removed negative.
    assert losses.dclr.dclr_stats(z1, noise, torch.zeros(3, 3).fill_diagonal_(1.0), 0.05)[
        "dclr_removed_fraction"].item() == approx(1.0)
    assert losses.dclr.dclr_stats(z1, noise, torch.ones(3, 3), 0.05)["dclr_removed_fraction"].item() == 0.0
    assert set(losses.dclr.dclr_stats(z1, noise[:0], weights, 0.05)) == {"dclr_removed_fraction"}


def test_dclr_module_records_its_statistics_each_forward():
    z1 = t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    z2 = z1 + 0.1
    # Complementary cosines: rows 0 and 1 ~ 0.995 apart, row 3 ~ 0.89 from row 2, the rest lower.
    comp = t([[1.0, 0.0, 0.0], [1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    loss_fn = build_loss("dclr", phi=0.8, k=0.5, noise_steps=0, tau=0.1)
    assert loss_fn.stats() == {}
    torch.manual_seed(3)
    loss_fn(Embeddings(z1, z2, complementary=comp))
    torch.manual_seed(3)
    noise = (torch.randn(2, 3) * 1.0).tolist()  # K = round(0.5 * 4); no ascent step: the noise is its draw
    stats = loss_fn.stats()
    _assert_device_scalars(stats)
    removed = sum(ref_cos(comp.tolist()[i], comp.tolist()[j]) >= 0.8 for i in range(4) for j in range(4) if i != j)
    assert removed == 4  # (0, 1), (1, 0), (2, 3), (3, 2)
    assert stats["dclr_removed_fraction"].item() == approx(removed / 12)
    logits = [ref_cos(a, n) / 0.1 for a in z1.tolist() for n in noise]
    assert stats["dclr_noise_logit"].item() == approx(sum(logits) / len(logits))

    # The next forward replaces them: orthogonal complementary embeddings remove nothing.
    loss_fn(Embeddings(z1, z2, complementary=torch.eye(4, 3)))
    assert loss_fn.stats()["dclr_removed_fraction"].item() == 0.0
    # With no noise vector there is no noise logit to report.
    no_noise = build_loss("dclr", phi=0.0, k=0)  # every cosine >= 0 removed: all 12 here
    no_noise(Embeddings(z1, z2, complementary=comp))
    assert list(no_noise.stats()) == ["dclr_removed_fraction"]
    assert no_noise.stats()["dclr_removed_fraction"].item() == 1.0


def test_regularised_loss_merges_its_terms_statistics():
    emb = _embeddings()
    loss_fn = build_loss("dclr", reg="dcl", phi=0.0)
    loss_fn(emb)
    stats = loss_fn.stats()
    assert set(stats) == {"dclr_removed_fraction", "dclr_noise_logit"}
    torch.testing.assert_close(stats["dclr_removed_fraction"], loss_fn.base.stats()["dclr_removed_fraction"])
    expected = (cos_sim(emb.complementary, emb.complementary) >= 0.0).float().fill_diagonal_(0).sum() / (8 * 7)
    torch.testing.assert_close(stats["dclr_removed_fraction"], expected)
