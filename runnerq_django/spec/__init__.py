"""The RunnerQ spec's pure logic: no I/O and no Django import, tested against the spec's vectors.

Internal: not part of the public API.
"""
