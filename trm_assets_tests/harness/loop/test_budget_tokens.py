"""The dry run's token and money estimate (issue 17.5)."""

from __future__ import annotations

from trm_assets.harness.loop.budget import TokenEstimate, prompt_token_estimate


def test_prompt_token_estimate_grows_with_turns() -> None:
    # 4,000 characters ≈ 1,000 tokens re-sent on each of 5 turns, +190 per earlier turn, +40 reply
    assert prompt_token_estimate(4000, 8) == 5 * 1000 + 190 * (0 + 1 + 2 + 3 + 4) + 5 * 40
    assert prompt_token_estimate(4000, 1) == 1000 + 40  # one turn when max_agent_steps is 1


def test_money_uses_both_prices_and_the_completion_share() -> None:
    tok = TokenEstimate(1000.0, "x", price_prompt_per_1k=0.5, price_completion_per_1k=2.0)
    # 10 rollouts = 10,000 tokens = 10 × 1k: 95% at 0.5 and 5% at 2.0
    assert abs(tok.money(10) - 10 * (0.95 * 0.5 + 0.05 * 2.0)) < 1e-9  # type: ignore[operator]
    assert TokenEstimate(1000.0, "x").money(10) is None  # no prices: no money line
