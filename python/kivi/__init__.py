"""kivi: a durable, crash-only, log-structured key-value store.

>>> import kivi
>>> with kivi.Db("my-store") as db:
...     db.put(b"user:1", b"ada")
...     db.get(b"user:1")
b'ada'

Keys and values are bytes (or bytearray, memoryview); ``str`` raises
``TypeError``. Every write is durable when it returns.
"""

from . import _errors
from ._errors import *  # noqa: F403 (the exception classes, listed in _errors.__all__)
from ._kivi import MAX_KEY_LEN, MAX_VALUE_LEN, Db, Iter, Snapshot, Table, TableIterator, WriteBatch

__all__ = [
    "Db",
    "WriteBatch",
    "Snapshot",
    "Iter",
    "Table",
    "TableIterator",
    "MAX_KEY_LEN",
    "MAX_VALUE_LEN",
    *_errors.__all__,
]

# Show the exceptions as kivi.Error, ... (not kivi._errors.Error).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__ == "kivi._errors":
        _obj.__module__ = "kivi"
del _name, _obj
