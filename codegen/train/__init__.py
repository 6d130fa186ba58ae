"""Training (the only part of cisl that needs torch).

Import the submodules directly: `codegen.train.api.run_train`, `codegen.train.model.SplitPatchTST`,
`codegen.train.config.load_config` (config needs no torch).
"""
