"""The strategax IR: typed SSA values with locality, ops, text printer/parser, verifier."""
from . import control_flow, logical_ops, sx_bucket, sx_dialect, var_dialect  # noqa: F401  (declare the ops)
from .attributes import ENUMS, RECORDS
from .opdefs import LOWERINGS, OP_DEFS, REFERENCE, OpDef, declare, lookup, register_primitive
from .ops import Block, Func, Location, Module, Operation, SymbolRef, VarDecl
from .parser import ParseError, parse
from .printer import print_module
from .sharding import Sharding
from .types import DTYPES, Locality, TensorType, dtype_name
from .values import Value
from .verifier import VerifyError, verify

__all__ = [
    "Block", "DTYPES", "ENUMS", "Func", "LOWERINGS", "Locality", "Location", "Module", "OP_DEFS",
    "OpDef", "Operation", "ParseError", "RECORDS", "REFERENCE", "Sharding", "SymbolRef", "TensorType",
    "Value", "VarDecl", "VerifyError", "declare", "dtype_name", "lookup", "parse",
    "print_module", "register_primitive", "verify",
]
