"""The dtypes the OpInfo sweep runs (opinfo.py) and its report names (_conformance_report.py)."""

DTYPES = ["float64", "float32", "bfloat16", "float16", "complex128", "complex64", "int64", "int32",
          "int16", "int8", "uint8", "bool"]
SHORT = {"float64": "f64", "float32": "f32", "bfloat16": "bf16", "float16": "f16",
         "complex128": "c128", "complex64": "c64", "int64": "i64", "int32": "i32", "int16": "i16",
         "int8": "i8", "uint8": "u8", "bool": "b8"}
