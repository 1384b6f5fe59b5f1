"""Connectors that plug meshpool into inference engines through the engines'
own plug-in mechanisms (no change to the engine):

* ``meshpool.integrations.lmcache``: an LMCache L2 "native plugin" (LMCache
  0.5.x, multiprocess server mode), so vLLM stores KV in meshpool through
  LMCache.
* ``meshpool.integrations.sglang``: an SGLang HiCache storage backend,
  loaded with ``--hicache-storage-backend dynamic``.

Neither engine can be installed on the machines this package is built on:
each connector follows the interface of the release named in its docstring
and is tested by a harness that makes that release's calls in its order
(python/tests/test_integrations.py). See docs/python.md.
"""
