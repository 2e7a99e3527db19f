"""The strategax IR: typed SSA values with locality, ops, text printer/parser, verifier.

No JAX primitives and no lowering live here: the ops are declared by `strategax.dialects`."""
from .attr_spec import Attr, Enum, Flag, Int, Str
from .attr_values import EnumAttr, Held, PrimitiveRef, Record, Splat, Subprogram, SymbolRef, dense_array
from .attributes import KINDS, format_attr
from .opdefs import (MODULE_ATTRS, OP_DEFS, READS_VARIABLE, TRAFFIC, VAR_ATTRS, WRITES_VARIABLE, OpDef,
                     UndeclaredOpError, add_resolver, declaration, declare, has_collective, has_effects,
                     is_collective, is_pure, lookup, may_write, op_effects)
from .ops import Block, Func, Location, Module, Operation, VarDecl
from .parser import ParseError, parse
from .printer import print_module
from .sharding import Sharding
from .types import DTYPES, Locality, TensorType, dtype_name
from .values import Value
from .verifier import VerifyError, verify

__all__ = [
    "Attr", "Block", "DTYPES", "Enum", "EnumAttr", "Flag", "Held", "KINDS", "PrimitiveRef", "Record", "Func", "Int",
    "Locality", "Location",
    "MODULE_ATTRS", "Module", "OP_DEFS", "OpDef", "Operation", "ParseError", "READS_VARIABLE",
    "Sharding", "Splat", "Str", "Subprogram", "SymbolRef", "TRAFFIC", "TensorType", "UndeclaredOpError", "VAR_ATTRS",
    "Value", "VarDecl", "VerifyError", "WRITES_VARIABLE", "add_resolver", "declaration", "declare", "dense_array",
    "dtype_name", "format_attr", "has_collective",
    "has_effects", "is_collective", "is_pure", "lookup", "op_effects", "parse", "print_module",
    "may_write", "verify",
]
