"""The variable session of one trace: the variables it touches, each checked to belong to the
strategy being traced and named by its module symbol (`dialects.variables`)."""
from __future__ import annotations

from typing import Any

from ..dialects.variables import variable, variable_of
from ..errors import DistributionValueError
from ..ir import SymbolRef, VarDecl


class VarSession:
    """The variables one trace touches; `decls` lists those its module refers to."""

    def __init__(self, strategy):
        self.strategy = strategy

    def check(self, var) -> None:
        owner = var._strategy
        if owner is not None and owner is not self.strategy:
            raise DistributionValueError(
                f"variable {var.name!r} was created in the scope of {owner!r} but is used in "
                f"a program of {self.strategy!r}",
                "create the variable inside `with strategy.scope():` of the strategy that uses it")

    def symbol(self, var) -> SymbolRef:
        self.check(var)
        return SymbolRef(var._symbol)

    def variables_of(self, module) -> list:
        """The variables `module` refers to, in order of first use (checked for ownership)."""
        seen: dict[str, Any] = {}
        for op in module.walk():
            ref = variable_of(op)
            if ref is not None and ref.name not in seen:
                var = variable(ref.name)
                self.check(var)
                seen[ref.name] = var
        return list(seen.values())

    @staticmethod
    def decls(variables: list) -> list[VarDecl]:
        return [VarDecl(v._symbol, v._ir_type(), v._ir_attrs()) for v in variables]
