"""The polyhedral model of a program and what is known about it: the Scop (statements, domains,
accesses), their typed expressions, affine helpers, value-based dependences, the Farkas
linearization the schedulers use, and the independent legality verifier."""
