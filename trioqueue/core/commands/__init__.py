"""The commands the core answers: the table that declares each once (:mod:`.table`, with
the declaration rules of :mod:`.registry`), and their handlers, a module per subject
(jobs, queries, groups, limits, the DLQ, crons, webhooks, the broker's numbers, the
dashboard, maintenance). A handler decodes a request, asks the state that owns the
answer (a queue's, or the router's broker-wide scope), and shapes bunqueue's reply."""
