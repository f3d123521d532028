"""Each loss against the form docs/method.md chooses for it ("The losses against their papers and released code"),
written here in NumPy from that form, not from raycse's code: for most losses the released code's lines, translated
one for one (a cosine over broadcast rows, ``nn.CrossEntropyLoss``'s mean, an affine-free BatchNorm1d); for DCLR the
form raycse takes from eq. 6 and the code together. Random inputs (seeded) give the known answers, and a closed form
pins each scale where one exists: a loss that summed where the form takes a mean, or scaled a correlation by N - 1,
fails here.

Where raycse departs from the released code and says that it does not matter (DCLR's masking, the noise's weight, the
noise's ascent), the claim is checked here too, at the published settings.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raycse.losses import (
    Embeddings,
    barlow_twins,
    build_loss,
    dcl,
    dclr_noise_negatives,
    debiased_info_nce,
    false_negative_weights,
    focal_info_nce,
    info_nce,
    off_dropout_info_nce,
    triplet,
)

N, H = 6, 5  # N != H and both > 2: a mean over either, or a factor N - 1, shows
TAU = 0.05


def draw(*shape, seed: int, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape) * scale


def run(fn, *arrays, **kwargs) -> float:
    """raycse's loss on float64 copies of the arrays, keyword ones too (it computes in float64 for float64 inputs)."""
    kwargs = {key: torch.tensor(value, dtype=torch.float64) if isinstance(value, np.ndarray) else value
              for key, value in kwargs.items()}
    return float(fn(*(torch.tensor(a, dtype=torch.float64) for a in arrays), **kwargs))


def close(expected: float):
    return pytest.approx(expected, rel=1e-9, abs=1e-12)


# ---- the released code's building blocks, in NumPy ----------------------------------------------------------------


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``nn.CosineSimilarity(dim=-1)(a.unsqueeze(1), b.unsqueeze(0))``: the (len(a), len(b)) cosines."""
    return (a @ b.T) / np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1))


def logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


def cross_entropy(logits: np.ndarray) -> float:
    """``nn.CrossEntropyLoss()(logits, arange(N))``: the mean over rows of -log softmax at the diagonal."""
    rows = np.arange(len(logits))
    return float(np.mean(logsumexp(logits) - logits[rows, rows]))


def batch_norm(z: np.ndarray) -> np.ndarray:
    """``nn.BatchNorm1d(H, affine=False)`` in training mode: each column centred, divided by its biased std."""
    return (z - z.mean(axis=0)) / np.sqrt(z.var(axis=0) + 1e-5)


# ---- SimCSE: princeton-nlp/SimCSE, simcse/models.py lines 46, 194-212 ---------------------------------------------


def simcse_released(z1, z2, tau, z3=None, hard_negative_weight=0.0) -> float:
    cos_sim = cosine(z1, z2) / tau
    if z3 is not None:
        z1_z3_cos = cosine(z1, z3) / tau
        cos_sim = np.concatenate([cos_sim, z1_z3_cos], axis=1)
        weights = np.zeros_like(cos_sim)
        weights[np.arange(len(z1)), len(z1) + np.arange(len(z1))] = hard_negative_weight  # "logits of weights"
        cos_sim = cos_sim + weights
    return cross_entropy(cos_sim)


def test_simcse_is_the_released_codes_cross_entropy_mean():
    z1, z2, z3 = draw(N, H, seed=1), draw(N, H, seed=2), draw(N, H, seed=3)
    assert run(info_nce, z1, z2, tau=TAU) == close(simcse_released(z1, z2, TAU))
    assert run(info_nce, z1, z2, tau=0.7) == close(simcse_released(z1, z2, 0.7))
    assert run(info_nce, z1, z2, tau=TAU, hard_neg=z3, hard_neg_weight=0.0) == close(
        simcse_released(z1, z2, TAU, z3))
    assert run(info_nce, z1, z2, tau=TAU, hard_neg=z3, hard_neg_weight=-1.5) == close(
        simcse_released(z1, z2, TAU, z3, hard_negative_weight=-1.5))
    # the scale, in closed form: N = 4 orthogonal unit rows give cosines 1 on the diagonal, 0 off it, so every
    # anchor's loss, and their mean, is log(e^(1/tau) + N - 1) - 1/tau; a sum over anchors would be N times it
    eye = np.eye(4, H)  # four orthogonal rows
    assert run(info_nce, eye, eye, tau=0.5) == close(math.log(math.exp(2.0) + 3) - 2.0)


# ---- Focal-InfoNCE: puerrrr/Focal-InfoNCE, focalNCE/models.py lines 46, 106-111, 187-192 --------------------------


def focal_released(z1, z2, temp, m) -> float:
    logits = cosine(z1, z2)  # its Similarity leaves the cosine undivided
    mask = np.eye(len(z1))  # F.one_hot(labels)
    alpha_p = logits * mask
    alpha_n = (logits + m) * (1 - mask)
    return cross_entropy((alpha_p * logits + alpha_n * logits) / temp)


def test_focal_is_the_released_codes_sp_logits_under_a_cross_entropy_mean():
    z1, z2 = draw(N, H, seed=4), draw(N, H, seed=5)
    for tau, m in ((0.07, 0.3), (0.05, 0.0), (0.5, 1.0)):
        assert run(focal_info_nce, z1, z2, tau=tau, m=m) == close(focal_released(z1, z2, tau, m))
    # eq. 3 sums l_i over the batch; the code, and raycse, take their mean: on the orthogonal rows of the
    # closed form above (positives 1, negatives 0) each l_i is log(e^(1/tau) + N - 1) - 1/tau
    eye = np.eye(4, H)
    assert run(focal_info_nce, eye, eye, tau=0.5, m=0.3) == close(math.log(math.exp(2.0) + 3) - 2.0)


# ---- off-dropout InfoNCE: Jiahao004/SimCSE-plus-plus, simcse/models_re_vicreg.py lines 248, 282-316 ---------------


def off_dropout_released(z1, z2, z0, temp, pos_ratio) -> float:
    pos_sim = pos_ratio * np.sum(z1 * z2, axis=1) / (np.linalg.norm(z1, axis=1) * np.linalg.norm(z2, axis=1)) / temp
    cos_sim = cosine(z0, z0) / temp
    neg_mask = np.eye(len(z1)) * np.log(1e-45)
    neg_sim = np.concatenate([cos_sim + neg_mask, pos_sim[:, None]], axis=1)
    return float(np.mean(-pos_sim + logsumexp(neg_sim)))


def off_dropout_eq3(z1, z2, z0, tau, m) -> float:
    """ImSimCSE eq. 3 as printed: -log( e^s(z1_i, z2_i) / (e^s(z1_i, z2_i) + m sum_{j != i} e^s(z0_i, z0_j)) )."""
    total = 0.0
    for i in range(len(z1)):
        positive = math.exp(cosine(z1[i:i + 1], z2[i:i + 1])[0, 0] / tau)
        negatives = sum(math.exp(cosine(z0[i:i + 1], z0[j:j + 1])[0, 0] / tau) for j in range(len(z0)) if j != i)
        total += -math.log(positive / (positive + m * negatives))
    return total / len(z1)


def test_off_dropout_is_the_released_codes_form_and_its_m_is_eq_3s():
    z1, z2, z0 = draw(N, H, seed=6), draw(N, H, seed=7), draw(N, H, seed=8)
    for pos_ratio in (0.9, 1.0, 1.2):
        assert run(off_dropout_info_nce, z1, z2, z0, tau=TAU, pos_ratio=pos_ratio) == pytest.approx(
            off_dropout_released(z1, z2, z0, TAU, pos_ratio), rel=1e-9)  # the code's mask leaves e^-103.6
    for m in (0.5, 0.9, 1.0):
        assert run(off_dropout_info_nce, z1, z2, z0, tau=TAU, m=m) == close(off_dropout_eq3(z1, z2, z0, TAU, m))


# ---- DCL: Jiahao004/SimCSE-plus-plus, simcse/models_vicreg.py lines 227-230 ---------------------------------------


def dcl_released(z1, z2, temp) -> float:
    z1_normd, z2_normd = batch_norm(z1), batch_norm(z2)
    cov = (z1_normd.T @ z2_normd) / len(z1) / temp
    return float(np.mean(-np.diagonal(cov) + logsumexp(cov)))


def test_dcl_is_the_released_codes_batch_normed_correlation_and_mean_over_dimensions():
    # scaled by 1000 so that BatchNorm's epsilon (1e-5 on a variance near 10^6) is far below the tolerance
    z1, z2 = draw(N, H, seed=9, scale=1000.0), draw(N, H, seed=10, scale=1000.0)
    for tau_dcl in (5.0, 0.05, 50.0):
        assert run(dcl, z1, z2, tau_dcl=tau_dcl) == pytest.approx(dcl_released(z1, z2, tau_dcl), rel=1e-7)
    # the scale, in closed form: columns standardised and orthogonal over the batch (a Hadamard matrix's) give
    # C = I, so every dimension's loss, and their mean, is log(e^(1/tau) + H - 1) - 1/tau. Eq. 5 as printed
    # (a sum over dimensions; logits (N - 1) C / tau) would give H times log(e^((N-1)/tau) + H - 1) - (N-1)/tau.
    hadamard = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=float)
    columns = hadamard[:, 1:]  # centred, orthogonal, each of norm 2: N = 4 rows, H = 3 dimensions
    expected = math.log(math.exp(1 / 0.5) + 2) - 1 / 0.5
    assert run(dcl, columns, columns, tau_dcl=0.5) == close(expected)
    printed = 3 * (math.log(math.exp(3 / 0.5) + 2) - 3 / 0.5)
    assert abs(run(dcl, columns, columns, tau_dcl=0.5) - printed) > 0.1


# ---- Barlow Twins: facebookresearch/barlowtwins, main.py lines 212-220 --------------------------------------------


def barlow_released(z1, z2, lambd) -> float:
    c = batch_norm(z1).T @ batch_norm(z2)
    c = c / len(z1)
    on_diag = np.sum((np.diagonal(c) - 1) ** 2)
    off_diag = np.sum(c ** 2) - np.sum(np.diagonal(c) ** 2)
    return float(on_diag + lambd * off_diag)


def test_barlow_is_the_released_codes_centred_correlation_and_sums():
    z1, z2 = draw(N, H, seed=11, scale=1000.0), draw(N, H, seed=12, scale=1000.0)
    for lambda_bt in (0.0051, 0.012, 1.0):
        assert run(barlow_twins, z1, z2, lambda_bt=lambda_bt) == pytest.approx(
            barlow_released(z1, z2, lambda_bt), rel=1e-7)
    # centred, as the code's BatchNorm centres (ImSimCSE's eq. 4 does not): a shift of a column changes nothing
    assert run(barlow_twins, z1 + 3000.0, z2, lambda_bt=0.0051) == pytest.approx(
        run(barlow_twins, z1, z2, lambda_bt=0.0051), rel=1e-9)
    # the scale, in closed form: opposite views of orthogonal standardised columns give C = -I, so each of the H
    # dimensions adds (1 - (-1))^2 = 4 and nothing is off the diagonal: a sum, 4H; a mean would give 4
    columns = np.array([[1, 1, 1], [-1, 1, -1], [1, -1, -1], [-1, -1, 1]], dtype=float)
    assert run(barlow_twins, columns, -columns, lambda_bt=0.0051) == close(4.0 * 3)


# ---- ImSimCSE: off-dropout + lambda DCL (Jiahao004/SimCSE-plus-plus, an earlier models_re_vicreg.py, 316-326) ----


def test_imsimcse_is_off_dropout_plus_lambda_times_dcl_at_the_codes_scale():
    z1, z2, z0 = (draw(N, H, seed=seed, scale=1000.0) for seed in (13, 14, 15))
    expected = off_dropout_released(z1, z2, z0, TAU, 0.9) + 0.1 * dcl_released(z1, z2, 5.0)
    loss = build_loss("imsimcse")
    assert loss.hparams == {"tau": 0.05, "m": 1.0, "pos_ratio": 0.9, "lambda": 0.1, "tau_dcl": 5.0}
    t = [torch.tensor(a, dtype=torch.float64) for a in (z1, z2, z0)]
    assert float(loss(Embeddings(t[0], t[1], z0=t[2]))) == pytest.approx(expected, rel=1e-7)


# ---- DCLR: eq. 6 with the code's positive in the denominator; RUCAIBox/DCLR, simcse/models.py lines 676-710 ------


def dclr_chosen(z1, z2, noise, alpha, tau) -> float:
    """The form raycse chooses: l_i = -log( e^(s_ii/tau) / (e^(s_ii/tau) + sum_{j != i} alpha_ij e^(s_ij/tau)
    + sum_k e^(s(z1_i, noise_k)/tau)) ), the mean over the N anchors."""
    total = 0.0
    for i in range(len(z1)):
        positive = math.exp(cosine(z1[i:i + 1], z2[i:i + 1])[0, 0] / tau)
        in_batch = sum(alpha[i, j] * math.exp(cosine(z1[i:i + 1], z2[j:j + 1])[0, 0] / tau)
                       for j in range(len(z2)) if j != i)
        noisy = sum(math.exp(cosine(z1[i:i + 1], n[None])[0, 0] / tau) for n in noise)
        total += -math.log(positive / (positive + in_batch + noisy))
    return total / len(z1)


def test_dclr_is_eq_6_with_the_positive_in_the_denominator_and_the_mean_over_anchors():
    z1, z2, c = draw(N, H, seed=16), draw(N, H, seed=17), draw(N, H, seed=18)
    noise = draw(N, H, seed=19)
    alpha = (cosine(c, c) < 0.3).astype(float)  # eq. 5, at a phi that removes some of these random negatives
    assert 0 < (alpha == 0).sum() - (np.diagonal(alpha) == 0).sum() < N * (N - 1)
    assert np.array_equal(false_negative_weights(torch.tensor(c, dtype=torch.float64), 0.3).numpy(), alpha)
    for tau in (TAU, 0.2):
        assert run(debiased_info_nce, z1, z2, noise, alpha, tau=tau) == close(dclr_chosen(z1, z2, noise, alpha, tau))
        assert run(debiased_info_nce, z1, z2, noise[:0], alpha, tau=tau) == close(
            dclr_chosen(z1, z2, noise[:0], alpha, tau))


def released_masking_cross_entropy(z1, z2, noise, alpha, tau) -> float:
    """The code's masking (line 708, ``cos_sim * weights``: a removed negative's logit becomes 0, e^0 = 1) under
    eq. 6's cross-entropy, to measure what the masking alone changes."""
    logits = np.concatenate([cosine(z1, z2), cosine(z1, noise)], axis=1) / tau
    weights = np.concatenate([alpha, np.ones((len(z1), len(noise)))], axis=1)
    np.fill_diagonal(weights, 1.0)
    return cross_entropy(logits * weights)


def test_dclr_removing_a_negative_or_zeroing_its_logit_differs_by_1e_7_at_tau_0_05():
    # positives at cosine about 0.85, negatives spread: SimCSE-like batches at the published tau
    z1 = draw(N, 32, seed=20)
    z2 = 0.85 * z1 / np.linalg.norm(z1, axis=1, keepdims=True) + 0.5 * draw(N, 32, seed=21) / math.sqrt(32)
    noise, alpha = draw(N, 32, seed=22), np.ones((N, N))
    alpha[0, 1] = alpha[2, 3] = alpha[4, 0] = 0.0
    chosen = dclr_chosen(z1, z2, noise, alpha, TAU)
    assert abs(chosen - released_masking_cross_entropy(z1, z2, noise, alpha, TAU)) < 1e-6


def test_dclr_noise_would_keep_weight_1_under_the_papers_weighting_too():
    # §4.3.1 weights noise negatives by the complementary model; a Gaussian vector's cosine with the anchors is
    # about N(0, 1/H): at phi = 0.9 none is removed, at the search's lowest phi (0.2) about 1 in 20,000, H = 384
    anchors, noise = draw(64, 384, seed=23), draw(64 * 16, 384, seed=24)
    cosines = cosine(anchors, noise)
    assert (cosines >= 0.9).sum() == 0
    assert (cosines >= 0.2).mean() < 1e-3


def released_ascent(z1, z2, init, steps, beta, tau):
    """The code's noise (lines 686-696): ascent on the training cross-entropy over [in-batch, noise] at tau,
    each step normalised per noise row and of length beta, by autograd."""
    z1, z2 = torch.tensor(z1), torch.tensor(z2)
    z_negative = torch.tensor(init, requires_grad=True)
    cos = torch.nn.functional.cosine_similarity
    cos_sim = cos(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1) / tau
    for _ in range(steps):
        fused = torch.cat([cos_sim, cos(z1.unsqueeze(1), z_negative.unsqueeze(0), dim=-1) / tau], 1)
        loss = torch.nn.functional.cross_entropy(fused, torch.arange(len(z1)))
        (grad,) = torch.autograd.grad(loss, z_negative)
        z_negative = (z_negative + grad / grad.norm(dim=-1, keepdim=True) * beta).detach().requires_grad_()
    return z_negative.detach().numpy()


def test_dclr_noise_from_eq_2_or_from_the_codes_ascent_gives_the_same_loss_at_the_published_step():
    z1, init = draw(16, 64, seed=25), draw(16, 64, seed=27)  # k = 1, sigma = 1
    z2 = 0.85 * z1 / np.linalg.norm(z1, axis=1, keepdims=True) + 0.5 * draw(16, 64, seed=26) / 8  # cosine ~0.86
    ours = dclr_noise_negatives(*(torch.tensor(a) for a in (z1, z2, init)), steps=4, beta=1e-3, tau_u=TAU).numpy()
    theirs = released_ascent(z1, z2, init, steps=4, beta=1e-3, tau=TAU)
    # each moved its noise 4 x beta = 0.004, in directions that differ, on vectors of norm about sqrt(H) = 8 ...
    for moved in (ours, theirs):
        assert np.linalg.norm(moved - init, axis=1) == pytest.approx(0.004, rel=1e-6)
    assert np.linalg.norm(ours - theirs, axis=1).max() > 1e-3
    # ... and on a SimCSE-like batch the loss barely sees the ascent, either one: the same to 1e-6
    alpha = np.ones((16, 16))
    loss = dclr_chosen(z1, z2, ours, alpha, TAU)
    assert loss == pytest.approx(dclr_chosen(z1, z2, theirs, alpha, TAU), abs=1e-6)
    assert loss == pytest.approx(dclr_chosen(z1, z2, init, alpha, TAU), abs=1e-6)


# ---- the triplet loss: the contrastive-learning note's formula, the mean over triplets ----------------------------


def test_triplet_is_the_notes_formula_on_the_unit_sphere_averaged_over_triplets():
    anchor, pos, neg = draw(N, H, seed=28), draw(N, H, seed=29), draw(N, H, seed=30)

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    a, p, n = unit(anchor), unit(pos), unit(neg)
    gaps = np.sum((a - p) ** 2, axis=1) - np.sum((a - n) ** 2, axis=1)
    for margin in (0.5, 2.0):
        assert run(triplet, anchor, pos, neg, margin=margin) == close(float(np.mean(np.maximum(0.0, gaps + margin))))
    # the scale, in closed form: the positive opposite the anchor and the negative equal to it give
    # max(0, 4 - 0 + margin) for every triplet; their mean is 4 + margin, a sum N times it
    eye = np.eye(4, H)
    assert run(triplet, eye, -eye, eye, margin=0.5) == close(4.5)
