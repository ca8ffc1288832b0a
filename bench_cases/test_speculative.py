"""The benchmark cases: one per (model pair, k, prompt).

Select with -k (``pytest bench_cases -k "gemma3_int8 and k8"``) or with the
``specbench`` marker; settings are the ``--specbench-*`` options.
"""


def test_speculative_decoding(spec_case, specbench):
    result = specbench.run(spec_case)
    specbench.assert_lossless(result)
