"""The per-query graph scheduler (:mod:`.graph_run`), what each primitive does
(:mod:`.handlers`), what it reads per plan node (:mod:`.plan_costs`), and the GC settings of a
serving process (:mod:`.serving_gc`)."""

from .graph_run import DeadlineExceeded, GraphRun, answer_nodes, execute

__all__ = ["DeadlineExceeded", "GraphRun", "answer_nodes", "execute"]
