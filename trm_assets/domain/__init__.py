"""The pure decision kernel (SPEC §2): no I/O, no asyncio, no dagster; seeded RNGs passed in.

``pools`` (test/validation/diagnosis split), ``batching`` (mini-batches, fidelity #10),
``ladder`` (information ladder, fidelity #6), ``gate`` (pairing, e-processes, SPRT, sign test,
horizon threshold, ``gate_decision``), ``baseline_cache`` (cache keys and provenance rules),
``probation``, ``quadrants``, ``run_level`` (run-level α policies), ``edits`` (apply report,
momentum block, edit budget, rejected buffer, skill-file path safety), plus the shared contracts
``question``, ``edit_schema``, ``errors`` and ``fingerprint``.
"""
