"""The typed timeline: one frozen record per kind of thing that happened, stored with a type tag
and a versioned JSON payload, its summary rendered from its fields.

Writers build a record (`base.Record`, one module per family: `state`, `repair`, `control`,
`decision`, `unit`) and hand it to the store inside a
`supervisor.record.store.records.TimelineEntry` (`at`, `subject`, `record`); readers get
`TimelineRow.record` back and read its fields.
"""
