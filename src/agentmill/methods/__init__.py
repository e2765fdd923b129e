"""One package per paper. A method imports only ``core``, ``lm`` and ``envs`` — never another method."""
