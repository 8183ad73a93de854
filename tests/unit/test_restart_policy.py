"""The supervisor's restart policy on a manual clock: doubling backoff for quick failures, reset
by a stable run, and a crash loop after too many restarts in the window."""

from strata.policy.restart import RestartPolicy


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_quick_failures_double_the_backoff_and_a_stable_run_resets_it():
    clock = Clock()
    p = RestartPolicy(clock, initial_backoff_s=0.5, max_backoff_s=4.0, max_restarts=100)
    delays = []
    for _ in range(6):
        delays.append(p.after_exit("node", ran_s=1.0))
        clock.t += 10
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert p.after_exit("node", ran_s=3600.0) == 0.5
    assert p.after_exit("gateway", ran_s=1.0) == 0.5  # per service


def test_a_crash_loop_stops_restarting_and_old_restarts_age_out():
    clock = Clock()
    p = RestartPolicy(clock, max_restarts=3, window_s=60.0)
    assert [p.after_exit("kv", 1.0) is not None for _ in range(3)] == [True, True, True]
    assert p.after_exit("kv", 1.0) is None
    assert p.restarts("kv") == 3
    clock.t = 61.0
    assert p.after_exit("kv", 1.0) is not None
