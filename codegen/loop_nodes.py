"""The loop AST's nodes: small immutable values (For, If, Block, Run) that both emitters (C and
LLVM), the CUDA mapping, the loop-AST check and the AST interpreter walk; loop bounds and
statement arguments are :mod:`polyopt.analysis.expr` trees over iterators and parameters."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from polyopt.analysis import expr as E


@dataclass(frozen=True)
class For:
    """``for (var = init; cond; var += step) body``; ``parallel`` iterations are independent."""

    var: str
    init: E.Expr
    cond: E.Expr
    step: int
    body: "Node"
    parallel: bool = False


@dataclass(frozen=True)
class If:
    cond: E.Expr
    then: "Node"
    otherwise: "Node | None" = None


@dataclass(frozen=True)
class Block:
    body: tuple["Node", ...]


@dataclass(frozen=True)
class Run:
    """One statement instance: ``statement`` with its iterators bound to ``args``."""

    statement: str
    args: tuple[E.Expr, ...]


Node = For | If | Block | Run


def children(node) -> tuple:
    """The nodes directly below a For, If or Block (none below anything else)."""
    if isinstance(node, For):
        return (node.body,)
    if isinstance(node, If):
        return (node.then,) if node.otherwise is None else (node.then, node.otherwise)
    if isinstance(node, Block):
        return node.body
    return ()


def nodes(node: Node) -> Iterator[Node]:
    """``node`` and every node below it, parents first."""
    yield node
    for child in children(node):
        yield from nodes(child)


def runs_on_threads(loop: Node) -> bool:
    """Whether a loop marked parallel runs on a thread team (in both emitters): only when each
    of its iterations runs a loop. An innermost parallel loop does too little per iteration to
    pay for starting a team, or for a barrier per iteration of a loop around it; it runs
    sequentially and is vectorized instead (Polly's rule)."""
    return isinstance(loop, For) and loop.parallel and any(isinstance(n, For) for n in nodes(loop.body))


def loop_ast_text(node: Node, indent: int = 0) -> str:
    """A compact human-readable rendering (for debugging and the CLI)."""
    pad = "  " * indent
    if isinstance(node, For):
        head = f"{pad}for {node.var} = {E.to_source(node.init)}; {E.to_source(node.cond)}; += {node.step}"
        return head + (" (parallel)" if node.parallel else "") + "\n" + loop_ast_text(node.body, indent + 1)
    if isinstance(node, If):
        text = f"{pad}if {E.to_source(node.cond)}\n{loop_ast_text(node.then, indent + 1)}"
        if node.otherwise is not None:
            text += f"{pad}else\n{loop_ast_text(node.otherwise, indent + 1)}"
        return text
    if isinstance(node, Block):
        return "".join(loop_ast_text(c, indent) for c in node.body)
    return f"{pad}{node.statement}({', '.join(E.to_source(a) for a in node.args)})\n"
