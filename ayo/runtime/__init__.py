"""The runtime: the App (engines and workflows by name, queries through the schedulers), its
engine set, plan cache, metrics and traces, the default engines (the composition root), their
measured profiles, and the data directory's corpora."""
