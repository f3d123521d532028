"""DCLR: InfoNCE with false negatives removed (judged by a frozen complementary model) and noise-based negatives
added, which climb towards the least uniform points of the space.

Paper: Zhou et al., 2022, "Debiased Contrastive Learning of Unsupervised Sentence Representations", §4 (eqs. 1-4 in
§4.1, eqs. 5-6 in §4.2, the whole in §4.3.1); phi, k, the noise's std and its ascent from §5.1 (BERT-base). Where
raycse's form departs from the printed equations or from the released code, and why: `debiased_info_nce`,
`dclr_noise_negatives`.

Needs: a complementary model (a frozen encoder; the paper's is a trained SimCSE, which stage 0 of a search trains on
SimCSE's own recipe when none is given).

Example:
    >>> import torch
    >>> from raycse.losses import Embeddings
    >>> from raycse.losses.dclr import DCLR
    >>> z1 = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-1.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    >>> z2 = torch.tensor([[1.0, 0.5, 2.0], [0.0, -1.0, 1.5], [-1.0, 1.5, 0.5], [0.5, 1.0, 1.0]])
    >>> loss = DCLR(phi=0.9, k=0.0)  # no noise negatives: nothing random
    >>> round(loss(Embeddings(z1, z2, complementary=z1)).item(), 4)
    0.0188
    >>> sorted(loss.stats())  # how many in-batch negatives phi removed
    ['dclr_removed_fraction']
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .declaration import Declaration, Hyperparameter
from .infonce import (
    EPS,
    _cross_entropy_diagonal,
    cos_sim,
    full_precision,
    paired_cos_sim,
    unit_norm,
    upcast,
)
from .simcse import SIMCSE_TAU
from .term import Embeddings, Term, require


@torch.no_grad()
@full_precision
def false_negative_weights(c: Tensor, phi: float) -> Tensor:
    """DCLR eq. 5: alpha_ij = 0 where s(c_i, c_j) >= phi, else 1.

    ``c`` holds a frozen complementary model's embeddings of the batch (the paper uses a trained SimCSE);
    a negative it finds at least phi-similar to the anchor is taken to be a false negative. The diagonal is
    not used by `debiased_info_nce`.

    Args:
        c: (N, H) complementary embeddings.
        phi: threshold in [0, 1].

    Returns:
        The (N, N) weights, 0. or 1., in float32 (float64 for float64 inputs); no gradient.
    """
    sim = cos_sim(c, c)
    return (sim < phi).to(sim.dtype)


@full_precision
def non_uniformity_loss(z1: Tensor, z2: Tensor, noise: Tensor, tau_u: float) -> Tensor:
    """DCLR eq. 2, the loss the noise negatives climb:

        L_U = mean_i [ -s(z1_i, z2_i)/tau_u + log sum_k exp(s(z1_i, noise_k)/tau_u) ]

    Its positive term does not depend on the noise; it is kept so that L_U is the paper's quantity.
    """
    return (torch.logsumexp(cos_sim(z1, noise) / tau_u, dim=1) - paired_cos_sim(z1, z2) / tau_u).mean()


@full_precision
def dclr_noise_negatives(
    z1: Tensor, z2: Tensor, init: Tensor, steps: int, beta: float, tau_u: float
) -> Tensor:
    """DCLR eqs. 1-4: move Gaussian noise vectors towards the points of the space where the batch is
    least uniform, by ``steps`` normalised gradient-ascent steps on `non_uniformity_loss`:

        g = grad_n L_U(z1, z2, n)        (z1, z2 detached)
        n <- n + beta g / ||g||_2        (norm of each row)

    Eq. 2 puts only the noise in L_U's denominator; the released code (simcse/models.py lines 686-694) climbs
    the training loss instead (the positive, the in-batch negatives and the noise under one softmax, at tau).
    The two gradients point differently, but at the published beta = 1e-3 and 4 steps the noise, of norm about
    sqrt(H), moves by 0.004 either way, and on a SimCSE-like batch (positives at cosine 0.85, tau 0.05) the loss
    changes by about 1e-7 with the ascent or without it: the two agree to 1e-6 (tests/test_loss_forms.py).

    g is computed in closed form (`non_uniformity_gradient`), not by autograd: the ascent then is a few
    matmuls and pointwise ops that `torch.compile` fuses into the loss's graph, needs no `enable_grad`
    inside a no_grad evaluation, and builds no graph that the training step would have to free. It agrees
    with autograd's gradient (tests/test_dclr_noise.py compares the two).

    Args:
        z1: (N, H) anchors.
        z2: (N, H) positives. L_U's positive term does not depend on the noise, so its gradient, and with
            it the result, does not depend on z2; the argument is kept so the signature follows eq. 2.
        init: (K, H) starting noise; the caller draws it from N(0, sigma^2) with K = round(k N).
        steps: number of ascent steps, >= 0.
        beta: step size, >= 0.
        tau_u: temperature of L_U, > 0.

    Returns:
        The (K, H) noise negatives in float32 (float64 for float64 ``init``), detached: they are inputs to
        the loss, not parameters.
    """
    noise = upcast(init).detach()
    if len(noise) == 0:
        return noise
    anchors = unit_norm(z1.detach())
    for _ in range(steps):
        g = non_uniformity_gradient(anchors, noise, tau_u).to(noise.dtype)
        noise = noise + beta * g / g.norm(dim=1, keepdim=True).clamp_min(EPS)
    return noise


def non_uniformity_gradient(anchors: Tensor, noise: Tensor, tau_u: float) -> Tensor:
    """grad_n L_U for unit anchors a_i (N, H) and noise n_k (K, H), in closed form. With u_k = n_k/||n_k||,
    s_ik = a_i . u_k and p_ik = softmax_k(s_ik/tau_u):

        grad_{n_k} L_U = 1/(N tau_u ||n_k||) sum_i p_ik (a_i - s_ik u_k)

    (d s_ik/d n_k = (a_i - s_ik u_k)/||n_k||, the part of a_i orthogonal to u_k; dL_U/ds_ik = p_ik/(N tau_u)).
    The norm is clamped at EPS as in `cos_sim`; below it the normalisation is the linear map n/EPS, whose
    derivative has no projection term, so the gradient is then that of autograd through `cos_sim` too.
    """
    dtype = torch.promote_types(anchors.dtype, upcast(noise).dtype)
    anchors, noise = anchors.to(dtype), noise.to(dtype)
    norms = noise.norm(dim=1, keepdim=True)  # (K, 1)
    clamped = norms.clamp_min(EPS)
    units = noise / clamped
    sims = anchors @ units.T  # (N, K)
    probs = torch.softmax(sims / tau_u, dim=1)
    pulled = probs.T @ anchors  # (K, H): sum_i p_ik a_i
    projected = (probs * sims).sum(dim=0).unsqueeze(1) * units  # (K, H): sum_i p_ik s_ik u_k
    projected = torch.where(norms > EPS, projected, torch.zeros_like(projected))
    return (pulled - projected) / (len(anchors) * tau_u * clamped)


@full_precision
def debiased_info_nce(z1: Tensor, z2: Tensor, noise: Tensor, weights: Tensor, tau: float) -> Tensor:
    """DCLR eq. 6, InfoNCE over weighted in-batch negatives plus noise negatives. With p_i = s(z1_i, z2_i)/tau:

        l_i = -p_i + log( exp(p_i) + sum_{j != i} alpha_ij exp(s(z1_i, z2_j)/tau) + sum_k exp(s(z1_i, noise_k)/tau) )

    A weight enters as log(alpha_ij) added to the logit, so alpha_ij = 0 removes that negative from the sum.
    Noise negatives always have weight 1, as does the positive whatever the diagonal of ``weights`` holds.

    Against the printed eq. 6 and the released code (RUCAIBox/DCLR, simcse/models.py lines 676-710), term by term:
    - the positive is in the denominator, as in the code (line 708, a softmax over every column, the diagonal's
      weight forced to 1 by lines 706-707); eq. 6 lists only negatives there, which would send the loss to
      +inf when alpha removes every negative of a row;
    - a removed negative leaves the sum, as eq. 6's alpha x e^(s/tau) does; the code multiplies the logit by 0
      (line 708, ``cos_sim * weights``), leaving e^0 = 1 in a sum that the positive alone makes e^(s_ii/tau):
      about 2e7 at tau = 0.05 and s_ii = 0.85, so the two differ by about 1e-7 a removed negative (at the
      search's largest tau, 0.2, by about 1/70);
    - noise negatives keep weight 1, as in the code (line 701: their complementary similarity is set to 0);
      §4.3.1 weights them by the complementary model too, but a Gaussian vector's cosine with any fixed vector
      is about N(0, 1/H): at phi = 0.9 none reaches phi, at the search's lowest phi, 0.2, about 1 in 20,000
      for H = 384 (tests/test_loss_forms.py counts them);
    - the loss is eq. 6's cross-entropy, averaged over anchors as SimCSE's code averages it. The code instead
      averages, over all N(N + K) entries, a binary cross-entropy of each softmax probability against the
      one-hot target (lines 709-710): another loss, not a rescaling of this one. DCLR's published lr (3e-5) was
      tuned on it; a search samples lr around it (dclr.yaml), so the search, not the published point, absorbs
      the difference.

    Args:
        z1: (N, H) anchors (first dropout view).
        z2: (N, H) positives (second dropout view).
        noise: (K, H) noise negatives, K >= 0 (see `dclr_noise_negatives`).
        weights: (N, N) alpha, constants (see `false_negative_weights`).
        tau: temperature, > 0.

    Returns:
        The mean of l_i over the N anchors, a 0-d tensor in float32 (float64 for float64 inputs).
    """
    log_weights = upcast(weights).detach().log().fill_diagonal_(0.0)
    in_batch = cos_sim(z1, z2) / tau + log_weights
    return _cross_entropy_diagonal(torch.cat([in_batch, cos_sim(z1, noise) / tau], dim=1))


class DCLR(Term):
    """DCLR: `debiased_info_nce` with false negatives removed and K = round(k N) noise negatives.

    The noise is drawn from the default torch generator on each call, so a seeded run reproduces.
    """

    # §5.1, BERT-base: phi = 0.9, k = 1, noise std 1, four ascent steps with learning rate 1e-3. The paper gives no
    # separate value for tau_u (eq. 2), only tau = 0.05, so tau_u defaults to it.
    declaration = Declaration(
        name="dclr",
        summary="InfoNCE with false negatives removed (by a frozen model) and noise negatives added",
        paper="Zhou et al., 2022: Debiased Contrastive Learning of Unsupervised Sentence Representations",
        section="§4, eqs. 1-6; phi, k and the noise §5.1",
        hyperparameters={
            "tau": SIMCSE_TAU,
            "phi": Hyperparameter(0.9, low=0.0, high=1.0),
            "k": Hyperparameter(1.0, low=0.0, high=math.inf),
            "noise_steps": Hyperparameter(4, low=0, high=math.inf, integer=True),
            "noise_beta": Hyperparameter(1e-3, low=0.0, high=math.inf),
            "noise_sigma": Hyperparameter(1.0, low=0.0, strict=True, high=math.inf, log=True),
            "tau_u": SIMCSE_TAU,
        },
        complementary=True,
    )

    def forward(self, emb: Embeddings) -> Tensor:
        h = self.hparams
        n, dim = emb.z1.shape
        init = torch.randn(round(h["k"] * n), dim, device=emb.z1.device, dtype=torch.float32) * h["noise_sigma"]
        noise = dclr_noise_negatives(emb.z1, emb.z2, init, h["noise_steps"], h["noise_beta"], h["tau_u"])
        weights = false_negative_weights(require(emb, "complementary", self.name), h["phi"])
        self._stats = dclr_stats(emb.z1, noise, weights, h["tau"])
        return debiased_info_nce(emb.z1, emb.z2, noise, weights, h["tau"])


@torch.no_grad()
@full_precision
def dclr_stats(z1: Tensor, noise: Tensor, weights: Tensor, tau: float) -> dict[str, Tensor]:
    """Whether DCLR's phi and k act on a batch (DCLR degenerates into SimCSE when neither does):

        dclr_removed_fraction  the fraction of the N(N - 1) in-batch negatives whose weight alpha_ij is 0
        dclr_noise_logit       mean over anchors i and noise vectors k of s(z1_i, noise_k)/tau
                               (absent when there is no noise vector, K = 0)
    """
    n = len(weights)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=weights.device)
    removed = ((weights == 0) & off_diagonal).sum(dtype=torch.float32) / max(n * (n - 1), 1)
    stats = {"dclr_removed_fraction": removed}
    if len(noise) > 0:
        stats["dclr_noise_logit"] = (cos_sim(z1.detach(), noise) / tau).mean().float()
    return stats


__all__ = ["dclr_noise_negatives", "debiased_info_nce", "false_negative_weights", "non_uniformity_loss"]
