# Tokenizers: HF / tiktoken agreement on the committed test tokenizers
# (tests/data/tokenizer, made by tokenizer/make_tokenizer_data.py), error
# paths, and the greenpipe tokenize command.
set(GP_TOK_DATA ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer)
set(GP_TOK_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/corpus.txt)
gp_add_test(tokenizer_hf SOURCES tokenizer/test_tokenizer_hf.c LIBS gp_tokenizer gp_dep_jansson)
target_compile_definitions(tokenizer_hf PRIVATE GP_TOKENIZER_CORPUS="${GP_TOK_CORPUS}")
