"""The running fleet: one worker per endpoint, the host watchers, the probe schedule, reconcile on
reload, and what the last run left in the store."""
