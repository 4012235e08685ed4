"""Frontends: each turns one kind of input into a :class:`polyopt.Scop`.

- :mod:`polyopt.frontends.dsl`: the Python loop-spec DSL (``@polyopt.kernel``).
- :mod:`polyopt.frontends.isl_text`: a Scop written directly as isl sets and maps.
"""
