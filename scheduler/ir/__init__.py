"""The plan: the primitive graph (nodes, typed ports, edges), its ops, the values and errors
that flow through it, prompt templates, output parsers, the Map registry, the engine interfaces
a plan targets, and the plan's checks and rendering. Depends on nothing else in Ayo."""
