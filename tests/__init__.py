"""quotaql's test suite; its folders mirror ``src/quotaql``.

- ``cost_analysis``, ``policy``, ``storage`` (one contract suite over every storage),
  ``limiter``, ``gate``, ``config``, ``instrumentation``, ``observability``: each package's
  own suites;
- ``adapters``: the Strawberry extension, Ariadne, Graphene 3 (graphql-core 3.2 only),
  quotaql.asgi, and every Strawberry HTTP integration under its own server;
- ``http``: the client's contract and the attacks over real HTTP servers;
- ``tools``: the offline tools (``quotaql`` command, tune, the scale-out simulation, demo);
  ``docs`` and ``examples``: what README.md, docs/ and examples/ show, run;
- ``support``: what the suites share: the servers (``servers.py``: redis-server, the cluster,
  prometheus; ``app_servers.py``: uvicorn and WSGI in threads; ``frameworks.py``: each
  integration's server), the shops they serve, the docs' snippets.

``make pytest`` runs it in parallel workers, then the suites marked ``serial`` (listed in
``conftest.py``) alone.
"""
