"""Served engines: a serving engine (vLLM) run as a real server in its own environment, reached over HTTP.

Knows nothing of pytest. ``vllm_server`` starts and stops ``vllm serve``; ``client`` streams one completion and
times it; ``metrics`` reads the server's speculative-decoding counters. docs/served.md says how to use them.
"""
