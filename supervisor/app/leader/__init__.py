"""Leadership: any number of instances share one store; exactly one leads (probes, repairs,
sends), the others follow until the lease runs out. See `supervisor.record.store.lease` for why it
is safe, `elector` for the claim loop and `gate` for what leading and following run."""
