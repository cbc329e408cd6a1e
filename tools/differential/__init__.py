"""Behavioural differential check of tdrl against TorchRL 0.14.1.

Scenarios (``scenarios/``) are written once against a namespace ``lib`` (``lib.envs``,
``lib.data``, ``lib.modules``, ...) that :mod:`differential.lib` resolves from ``torchrl`` or
``tdrl``. :mod:`differential.run` executes them in one library per process and serialises what
they return (:mod:`differential.encode`); :mod:`differential.compare` lists the differences.

Record TorchRL's side (in the throwaway venv, torchrl is never a tdrl dependency)::

    .venv/bin/python tools/differential/run.py record   # runs /tmp/trl-venv/bin/python

Print today's differences (both libraries, one subprocess each)::

    .venv/bin/python tools/differential/run.py report

``tests/compat/test_differential.py`` runs the tdrl side of every scenario and compares it with
``torchrl_results.json``.
"""
