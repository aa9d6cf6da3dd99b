# Chat templates: renderings and token ids against HF transformers'
# apply_chat_template (tests/chat/expected.json), detection of the real
# chat_template strings (tests/chat/templates.json), made by
# tests/chat/make_chat_data.py.
gp_add_test(chat_templates SOURCES chat/test_chat.c LIBS gp_chat gp_tokenizer gp_dep_jansson)
target_compile_definitions(chat_templates PRIVATE GP_CHAT_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/chat")
