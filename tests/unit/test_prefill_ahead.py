"""The tokens a request waits behind by class (strata.policy.scheduling.prefill_ahead)."""

from strata.policy.scheduling.prefill_ahead import class_tokens, tokens_ahead


def test_class_tokens_is_canonical():
    assert class_tokens({2: 5, 0: 7, 1: 0}) == ((0, 7), (2, 5))
    assert class_tokens([(1, 3), (1, 4), (0, -2)]) == ((1, 7),)
    assert class_tokens(()) == ()


def test_a_class_waits_for_its_own_and_higher_and_one_step_of_the_rest():
    queued = ((0, 800), (1, 300), (2, 100))
    assert tokens_ahead(queued, 2, 64) == 100 + 64
    assert tokens_ahead(queued, 1, 64) == 400 + 64
    assert tokens_ahead(queued, 0, 64) == 1200
    assert tokens_ahead(queued, 3, 2048) == 1200  # the step under way holds them all
    assert tokens_ahead(queued, 2, 0) == 1200  # no step size reported: no cap
    assert tokens_ahead((), 2, 64) == 0
