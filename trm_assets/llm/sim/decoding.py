"""How the simulated agent decodes (issue 15): temperature, text perturbation, context dilution.

For question q reading instruction text t (docs/decision-sim-decoding-profiles.md)::

    x     = a − s·d_q + b·[cue] − c·[harm] − λ·max(0, W(t) − W₀(task type of q)) / 100
    P     = g + (1 − g)·σ(x)                                   (issue 4's model, diluted)
    P_eff = Φ((Φ⁻¹(P) − √(1 − ρ)·E_{q,t}) / √ρ)                (text_flip_rate f > 0)
    correct  ⇔  U < P_eff

* ``W(t)`` counts the words of the instruction text (:func:`instruction_parts`), ``W₀`` the words
  of the committed seed prompt set for that task type (:func:`seed_words`), λ = ``length_cost``.
* ``E_{q,t} ~ N(0, 1)`` is hashed from (sim seed, q, the text's key): every distinct text carries
  its own idiosyncratic, per-question perturbation. It is the text part of a latent
  ``L = √ρ·Z_q + √(1 − ρ)·E_{q,t} ~ N(0, 1)`` with ``correct ⇔ L < Φ⁻¹(P)``, so
  ``E_t[P_eff] = P`` exactly: rewording moves individual answers, not expected accuracy.
* ρ = :func:`flip_correlation` (P, f) makes two independent texts disagree on q with
  probability f at temperature 0 (the knob holds per question, hence on any pool), except where
  P leaves no room (2P(1 − P) ≤ f: ρ = 0, the answer is fixed by the text alone).
* ``U`` = H(seed, q) at temperature 0 (``Φ(Z_q)``: the question part, identical for every text and
  sample) and H(seed, q, normalized text, sample index) above 0 (issue 4's fresh draw).
* With ``temperature_scale`` τ > 0, a draw at temperature T > 0 is
  ``U = Φ(√r·Z_q + √(1 − r)·Z_s)``, ``r = exp(−(T/τ)²)`` (:func:`draw_correlation`), ``Z_s``
  the fresh draw's normal score: still uniform (so the oracle is unchanged at any T), but two
  draws of one prompt agree more often the lower T, as a real model's samples do (a low
  temperature sharpens every answer distribution towards the greedy answer). τ = 0 keeps issue
  4's draw.

With ``text_flip_rate = length_cost = 0`` every function here is the identity on issue 4's P, so
the default world reproduces bit for bit.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from pathlib import Path
from statistics import NormalDist
from typing import Final

import numpy as np

from trm_assets.domain.errors import TrmError
from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.llm.sim.draws import digest, normal, normalize_text
from trm_assets.llm.sim_config import SimConfig, latent_correlation

#: The committed seed prompt set (``prompts/``): the reference length of ``length_cost``.
SEED_PROMPTS_DIR: Final = Path(__file__).resolve().parents[3] / "prompts"
# The agent contract's skill block (trm_assets/agent/messages.py ``skill_block``).
_SKILL_BLOCK = re.compile(r'<skill file="[^"\n]*">\n(.*?)\n</skill>', re.DOTALL)
_STD = NormalDist()
_SIMPSON_PANELS = 24  # the integrand is analytic on [0, π/2]: error far below 1e-9


class SeedPromptsError(TrmError, FileNotFoundError):
    """The seed prompt set that ``sim.length_cost`` measures against is not readable."""


def resolve_temperature(config: SimConfig, temperature: float | None) -> float:
    """The request's temperature, or the profile's ``agent_temperature`` when it names none."""
    return config.agent_temperature if temperature is None else float(temperature)


def is_greedy(config: SimConfig, temperature: float | None) -> bool:
    """Temperature 0 (or below): the answer depends on the question and the text only."""
    return resolve_temperature(config, temperature) <= 0.0


def draw_correlation(config: SimConfig, temperature: float | None) -> float:
    """r(T): the latent correlation of a draw at temperature T with the greedy draw: 1 at 0;
    ``exp(−(T/τ)²)`` above 0 with ``temperature_scale`` τ > 0; 0 (issue 4's draw) with τ = 0."""
    return latent_correlation(config.temperature_scale, resolve_temperature(config, temperature))


_U_EDGE = 1e-15  # Φ⁻¹ needs 0 < u < 1; hash uniforms are in [0, 1)


def correlated_unit(greedy: float, fresh: float, r: float) -> float:
    """``Φ(√r·Φ⁻¹(greedy) + √(1 − r)·Φ⁻¹(fresh))``: uniform when both are; ``fresh`` itself at
    r = 0 (bit for bit), ``greedy`` at r = 1."""
    if r <= 0.0:
        return fresh
    if r >= 1.0:
        return greedy
    zg = _STD.inv_cdf(min(max(greedy, _U_EDGE), 1.0 - _U_EDGE))
    zs = _STD.inv_cdf(min(max(fresh, _U_EDGE), 1.0 - _U_EDGE))
    return _STD.cdf(math.sqrt(r) * zg + math.sqrt(1.0 - r) * zs)


def disagreement(p: float, r: float) -> float:
    """P(two draws of latent correlation r disagree) on a question of probability ``p``:
    ``2p(1 − p) − (1/π)∫₀^{arcsin r} exp(−c²/(1 + sin u)) du`` (Plackett), c = Φ⁻¹(p)."""
    if p <= 0.0 or p >= 1.0:
        return 0.0
    c2 = _STD.inv_cdf(p) ** 2
    return max(0.0, 2.0 * p * (1.0 - p) - _flip_integral(c2, math.asin(min(max(r, 0.0), 1.0))))


# --- what the agent reads ------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)  # keys are whole prompt sets: bound the memory
def _parts(texts: tuple[str, ...]) -> tuple[str, ...]:
    parts: list[str] = []
    for t in texts:
        parts.extend(_SKILL_BLOCK.findall(t))
        parts.append(_SKILL_BLOCK.sub("\n", t))
    return tuple(sorted(n for n in (normalize_text(p) for p in parts) if n.strip()))


def instruction_parts(texts: Iterable[str]) -> tuple[str, ...]:
    """The instruction texts as sorted, normalized parts, skill blocks split out of the system
    message: the same tuple whether given the rendered request (system message + tool
    descriptions) or the oracle's pieces (skills, system prompt, tool descriptions)."""
    return _parts(tuple(texts))


def text_key(parts: tuple[str, ...]) -> str:
    """The identity of an instruction text: any change of words is a different text."""
    return digest("instruction-text", *parts)


@functools.lru_cache(maxsize=1024)  # keys are whole prompt sets: bound the memory
def word_count(parts: tuple[str, ...]) -> int:
    """Words (runs of letters and digits) of normalized parts."""
    return sum(len(p.split()) for p in parts)


@functools.lru_cache(maxsize=64)
def seed_words(task_type: str, prompts_dir: Path = SEED_PROMPTS_DIR) -> int:
    """Words a question of ``task_type`` reads with the committed seed prompts: system prompt,
    every tool description, ``default-strategy.md`` and the task type's skill."""
    files = [
        prompts_dir / "agent_system.md",
        prompts_dir / "skills" / skill_file_name(task_type),
        prompts_dir / "skills" / DEFAULT_SKILL_FILE,
    ]
    tools = sorted((prompts_dir / "tools").glob("*.md"))
    how = (
        "sim.length_cost measures the instruction length against the committed seed prompt set; "
        f"restore {prompts_dir} from the repository, or set sim.length_cost=0"
    )
    if not tools:
        raise SeedPromptsError(f"{prompts_dir / 'tools'}: no tool description (*.md). {how}")
    texts: list[str] = []
    for p in [*files, *tools]:
        try:
            texts.append(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise SeedPromptsError(f"{p}: not readable ({e.strerror}). {how}") from None
    return word_count(instruction_parts(texts))


def extra_words(task_type: str, parts: tuple[str, ...]) -> int:
    """Words read beyond the seed prompt set (never negative: shorter text earns no bonus)."""
    return max(0, word_count(parts) - seed_words(task_type))


# --- the per-text perturbation -------------------------------------------------------------------


def _flip_integral(c2: float, theta: float) -> float:
    """(1/π)·∫₀^θ exp(−c²/(1 + sin u)) du by Simpson's rule."""
    if theta <= 0.0:
        return 0.0
    n = _SIMPSON_PANELS
    h = theta / n
    total = 0.0
    for i in range(n + 1):
        w = 1.0 if i in (0, n) else (4.0 if i % 2 else 2.0)
        total += w * math.exp(-c2 / (1.0 + math.sin(i * h)))
    return total * h / 3.0 / math.pi


@functools.lru_cache(maxsize=65536)
def flip_correlation(p: float, flip: float) -> float:
    """ρ such that two independent texts flip a question of accuracy ``p`` with prob. ``flip``.

    With ``c = Φ⁻¹(p)`` the flip probability is ``2(p − Φ₂(c, c; ρ))`` and, by Plackett's
    identity ``∂Φ₂/∂ρ = φ₂``, equals ``2p(1 − p) − (1/π)∫₀^{arcsin ρ} exp(−c²/(1 + sin u)) du``.
    That integral is increasing and convex in θ = arcsin ρ, so Newton's method from θ = π/2
    converges monotonically. ``flip ≥ 2p(1 − p)`` (no room) gives 0; ``flip ≤ 0`` gives 1.
    """
    if flip <= 0.0 or p <= 0.0 or p >= 1.0:
        return 1.0
    target = 2.0 * p * (1.0 - p) - flip  # the integral's value at the solution
    if target <= 0.0:
        return 0.0
    c2 = _STD.inv_cdf(p) ** 2
    theta = math.pi / 2.0
    for _ in range(60):
        slope = math.exp(-c2 / (1.0 + math.sin(theta))) / math.pi
        step = (_flip_integral(c2, theta) - target) / slope
        theta = max(0.0, theta - step)
        if abs(step) < 1e-13:
            break
    return math.sin(theta)


def perturbed_probability(p: float, rho: float, shift: float) -> float:
    """P(correct | the text's standard-normal part ``shift``) in the latent model of the module."""
    if rho >= 1.0 or p <= 0.0 or p >= 1.0:
        return p
    c = _STD.inv_cdf(p)
    if rho <= 0.0:  # all of the latent is the text's: the text alone decides
        return 1.0 if shift < c else 0.0
    return _STD.cdf((c - math.sqrt(1.0 - rho) * shift) / math.sqrt(rho))


def text_shift(config: SimConfig, question_id: str, key: str) -> float:
    """E_{q,t}: the standard-normal idiosyncrasy of text ``key`` for question ``question_id``."""
    return normal(config.seed, "text-flip", question_id, key)


def text_probability(
    config: SimConfig, question_id: str, parts: tuple[str, ...], p: float
) -> float:
    """``P_eff``: ``p`` perturbed by the text ``parts`` (``p`` itself when the flip rate is 0)."""
    if config.text_flip_rate <= 0.0:
        return p
    rho = flip_correlation(p, config.text_flip_rate)
    return perturbed_probability(p, rho, text_shift(config, question_id, text_key(parts)))


# --- the dependence between gate passes (``trm bench decoding``'s ground truth) ------------------

_GL_NODES, _GL_WEIGHTS = (tuple(float(v) for v in a) for a in np.polynomial.legendre.leggauss(64))


def joint_correct(p_a: float, p_b: float, r: float) -> float:
    """P(both correct) of two draws thresholded at ``p_a`` and ``p_b`` whose latents correlate
    ``r`` ∈ [0, 1]: Φ₂(Φ⁻¹(p_a), Φ⁻¹(p_b); r) by Plackett's integral
    ``Φ(a)Φ(b) + (1/2π)∫₀^{arcsin r} exp(−(a² + b² − 2ab·sin θ)/(2cos²θ)) dθ`` (Gauss–Legendre)."""
    if p_a <= 0.0 or p_b <= 0.0:
        return 0.0
    if p_a >= 1.0 or p_b >= 1.0:
        return min(p_a, p_b)
    if r >= 1.0:
        return min(p_a, p_b)
    if r <= 0.0:
        return p_a * p_b
    a, b = _STD.inv_cdf(p_a), _STD.inv_cdf(p_b)
    half = math.asin(r) / 2.0
    total = 0.0
    for x, w in zip(_GL_NODES, _GL_WEIGHTS, strict=True):
        s = math.sin(half * (x + 1.0))
        total += w * math.exp(-(a * a + b * b - 2.0 * a * b * s) / (2.0 * (1.0 - s * s)))
    return p_a * p_b + total * half / (2.0 * math.pi)


def pass_dependence_truth(
    probabilities: Iterable[tuple[float, float]], r: float
) -> tuple[float, float]:
    """(E[d₁·d₂], E[d²]) of two passes of texts A and B, averaged over questions given as
    (P_A, P_B) pairs (the oracle's P_eff), when every two draws of a question share latent
    correlation ``r`` (:func:`draw_correlation`; the fresh parts are independent across texts
    and passes, the greedy part is the question's): ``d = b − a``, so
    ``E[d₁d₂] = Φ₂(B, B) + Φ₂(A, A) − 2Φ₂(A, B)`` and ``E[d²] = P_A + P_B − 2Φ₂(A, B)``."""
    cross = disc = 0.0
    n = 0
    for p_a, p_b in probabilities:
        ab = joint_correct(p_a, p_b, r)
        cross += joint_correct(p_b, p_b, r) + joint_correct(p_a, p_a, r) - 2.0 * ab
        disc += p_a + p_b - 2.0 * ab
        n += 1
    if n == 0:
        raise ValueError("pass_dependence_truth needs at least one question")
    return cross / n, disc / n
