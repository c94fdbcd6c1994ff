"""Build the optional C helper; oncelog falls back to pure Python if it cannot compile."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "oncelog.protocol.records._speedups",
            ["src/oncelog/protocol/records/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
