"""Tune's errors under Ray's names."""


class TuneError(Exception):
    """A trial or the experiment failed; the message says which and why."""


class TuneStopTrialError(TuneError):
    pass


__all__ = ["TuneError", "TuneStopTrialError"]
