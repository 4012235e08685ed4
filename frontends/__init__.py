"""Frontends: each turns one kind of input into a :class:`polyopt.Scop`.

- :mod:`polyopt.frontends.dsl`: the Python loop-spec DSL (``@polyopt.kernel``).
- :mod:`polyopt.frontends.isl_text`: a Scop written directly as isl sets and maps.
- :mod:`polyopt.frontends.c_scop`: ``#pragma scop`` regions of C files (``polyopt.from_c``).
- :mod:`polyopt.frontends.einsum`: numpy einsum subscripts (``polyopt.einsum``).
"""
