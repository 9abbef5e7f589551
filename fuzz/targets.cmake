# The libFuzzer targets (fuzz/fuzz_<name>.cpp): one list, read by fuzz/CMakeLists.txt (which builds
# them) and tests/reliability/CMakeLists.txt (which runs them briefly as ctests).
set(JOURNEY_FUZZ_TARGETS
  gguf safetensors hf_config generation_config tokenizer_config hf_tokenizer sentencepiece
  llama2c llama2c_tokenizer jinja trace openai_request json_schema)
