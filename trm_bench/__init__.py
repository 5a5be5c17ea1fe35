"""Benchmarks of trm-assets, outside the product package.

They use the product's public API only (the ``trm`` commands, the harness entry points and the
loop observer seam); ``trm bench ...`` dispatches here lazily.
"""
