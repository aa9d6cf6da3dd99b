#!/usr/bin/env python3
"""Makes the chat template tests' data: tests/chat/templates.json (the Jinja
chat_template strings of the supported model families, and of some that
greenpipe refuses, for the detection tests) and tests/chat/expected.json
(what HF transformers' apply_chat_template renders for each supported
template on a set of conversations, with and without the generation prompt,
and the token ids it gets on the committed test tokenizers).

    pip install transformers jinja2 tokenizers   # torch is not needed
    python3 tests/chat/make_chat_data.py [OUT_DIR]   # default tests/chat

Nothing is downloaded: the tokenizer objects are built from the committed
test tokenizers in tests/data/tokenizer with chat_template, bos_token and
eos_token set here. The template strings are those of each model's
tokenizer_config.json "chat_template", copied from public copies of the
files; where a copy was not found verbatim the text was written out and the
entry says so ("origin"). The committed files were made with transformers
5.24.0, jinja2 3.1.6 and tokenizers 0.23.3.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOK = os.path.join(HERE, "..", "data", "tokenizer")

# Meta-Llama-3-8B-Instruct (and 70B): one line.
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

# Llama-3.1-8B-Instruct (and 70B, 405B): a dated system block always, tools.
LLAMA31 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Llama-3.2-1B/3B-Instruct: 3.1's form, but dated by the clock
# (strftime_now), so a rendering depends on the day: refused.
LLAMA32 = LLAMA31.replace(
    '{%- if not date_string is defined %}\n    {%- set date_string = "26 Jul 2024" %}\n{%- endif %}',
    '{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n'
    '        {%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n'
    '        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}')
assert LLAMA32 != LLAMA31

# Qwen2-7B-Instruct (and the other Qwen2 Instruct sizes): ChatML with a
# default system message.
QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Qwen2.5-7B-Instruct (and the other Qwen2.5 Instruct sizes).
QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# OpenHermes-2.5-Mistral-7B and other plain ChatML models: no default system.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Mistral-7B-Instruct-v0.1 and v0.2 as their tokenizer_config.json has it
# since mid 2024 (the system message goes before the first user message).
MISTRAL = r"""{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

# Mistral-7B-Instruct-v0.3: the system message goes into the last user
# message, [INST] and [/INST] are control tokens, no space before [/INST].
MISTRAL_V3 = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# Llama-2-7b-chat-hf (and 13b, 70b).
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
          "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}"
          "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
          "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
          "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
          "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

# Refused: the first Mistral-7B-Instruct-v0.1 template (no system message;
# "</s> " between turns) and the first v0.2 / Mixtral one ("</s>" alone).
MISTRAL_V01_OLD = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                   "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
                   "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
                   "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
                   "{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and "
                   "assistant roles are supported!') }}{% endif %}{% endfor %}")
MIXTRAL_OLD = MISTRAL_V01_OLD.replace("eos_token + ' ' }}", "eos_token}}")
assert MIXTRAL_OLD != MISTRAL_V01_OLD
# Refused: gemma-7b-it (its own markers) and a ChatML template that starts
# with BOS (Hermes 3).
GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
         "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
         "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
         "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")
HERMES3 = "{{bos_token}}" + QWEN2

# name in templates.json -> (template, greenpipe name or None when refused,
# model it comes from, origin)
TEMPLATES = {
    "llama3": (LLAMA3, "llama3", "Meta-Llama-3-8B-Instruct", "public copy, verbatim"),
    "llama3.1": (LLAMA31, "llama3.1", "Llama-3.1-8B-Instruct", "public copy, verbatim"),
    "llama3.2": (LLAMA32, None, "Llama-3.2-1B-Instruct", "public copy, verbatim"),
    "qwen2": (QWEN2, "qwen2", "Qwen2-7B-Instruct", "public copy, verbatim"),
    "qwen2.5": (QWEN25, "qwen2.5", "Qwen2.5-7B-Instruct", "public copy, verbatim"),
    "chatml": (CHATML, "chatml", "OpenHermes-2.5-Mistral-7B", "public copy, verbatim"),
    "mistral": (MISTRAL, "mistral", "Mistral-7B-Instruct-v0.1 / v0.2 (2024 revision)", "public copy, verbatim"),
    "mistral-v3": (MISTRAL_V3, "mistral-v3", "Mistral-7B-Instruct-v0.3",
                   "assembled from public copies of revisions of the file (alternation check, "
                   "tool blocks, trimmed assistant content): the revision on the model page may "
                   "differ in its tool parts"),
    "llama2": (LLAMA2, "llama2", "Llama-2-7b-chat-hf", "public copy, verbatim"),
    "mistral-v0.1-2023": (MISTRAL_V01_OLD, None, "Mistral-7B-Instruct-v0.1 (2023 revision)", "public copy, verbatim"),
    "mixtral-2023": (MIXTRAL_OLD, None, "Mixtral-8x7B-Instruct-v0.1 (2023 revision)", "public copy, verbatim"),
    "gemma": (GEMMA, None, "gemma-7b-it", "public copy, verbatim"),
    "hermes3": (HERMES3, None, "Hermes-3-Llama-3.1-70B (GGUF metadata)", "public copy, verbatim"),
}

# greenpipe name -> (templates.json entry, tokenizer dir, bos, eos). The
# tokenizers carry the template's special tokens, so the ids can be checked.
SUPPORTED = {
    "llama3": ("llama3", "bl_llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1": ("llama3.1", "bl_llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "chatml": ("chatml", "bl_qwen2", None, "<|im_end|>"),
    "qwen2": ("qwen2", "bl_qwen2", None, "<|im_end|>"),
    "qwen2.5": ("qwen2.5", "bl_qwen2", None, "<|im_end|>"),
    "mistral": ("mistral", "sp_mistral", "<s>", "</s>"),
    "mistral-v3": ("mistral-v3", "sp_mistral", "<s>", "</s>"),
    "llama2": ("llama2", "sp_llama2", "<s>", "</s>"),
}


def m(role, content):
    return {"role": role, "content": content}


# Python's str.strip() (Jinja's trim, .strip()) removes more than ASCII
# whitespace: U+00A0, U+3000, U+001C..U+001F, U+0085 and others.
CONVERSATIONS = [
    ("user", [m("user", "Hello")]),
    ("system_user", [m("system", "You are terse."), m("user", "Hi there, who are you?")]),
    ("multi_turn", [m("system", "You are a helpful assistant"), m("user", "Hello"), m("assistant", "Hi there"),
                    m("user", "Who are you"), m("assistant", "I am an assistant"), m("user", "Another question")]),
    ("multi_no_system", [m("user", "Hello"), m("assistant", "Hi!"), m("user", "2+2?")]),
    ("ends_with_assistant", [m("system", "Be brief."), m("user", "Name a colour."), m("assistant", "Blue.")]),
    ("unicode_newlines", [m("system", "Réponds en français.\nSois bref."),
                          m("user", "Grüße, 世界! 🎉\nline two\n\n\tindented"),
                          m("assistant", "Ça va ? 😀\n- a\n- b"), m("user", "日本語で？")]),
    ("whitespace_edges", [m("system", "  sys with spaces \n"), m("user", "  padded user  \n"),
                          m("assistant", "   I am an assistant   "), m("user", "\nnext\n")]),
    ("unicode_spaces", [m("user", "\u00a0\u3000\u2003text\u0085\u001c\u00a0"), m("assistant", "\u2028ok\u3000"),
                        m("user", "\u200bzero width is not space\u200b")]),
    ("empty_content", [m("system", ""), m("user", ""), m("assistant", ""), m("user", "x")]),
    ("empty_user", [m("user", "")]),
    ("special_text", [m("user", "What does <s> or <|im_end|> mean? [INST] x [/INST]")]),
    ("system_only", [m("system", "Only a system message.")]),
    ("assistant_first", [m("assistant", "I start."), m("user", "Fine.")]),
    ("two_users", [m("user", "One."), m("user", "Two.")]),
    ("system_later", [m("user", "Hi"), m("system", "Late system."), m("user", "Still there?")]),
]


def make_tokenizer(name):
    from transformers import PreTrainedTokenizerFast
    key, tokdir, bos, eos = SUPPORTED[name]
    kw = {"tokenizer_file": os.path.join(TOK, tokdir, "tokenizer.json"), "eos_token": eos}
    if bos is not None:
        kw["bos_token"] = bos
    tok = PreTrainedTokenizerFast(**kw)
    tok.chat_template = TEMPLATES[key][0]
    return tok


def render(tok, msgs, agp, tokenize):
    out = tok.apply_chat_template(msgs, tokenize=tokenize, add_generation_prompt=agp)
    if tokenize and not isinstance(out, list):  # a BatchEncoding where return_dict is the default
        out = out["input_ids"]
    return out


def main():
    import transformers
    from jinja2.exceptions import TemplateError
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    os.makedirs(out, exist_ok=True)
    tj = {k: {"template": t, "greenpipe": g, "model": mdl, "origin": o} for k, (t, g, mdl, o) in TEMPLATES.items()}
    with open(os.path.join(out, "templates.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    exp = {"made_with": {"transformers": transformers.__version__},
           "conversations": [{"name": n, "messages": msgs} for n, msgs in CONVERSATIONS], "templates": {}}
    for name, (key, tokdir, bos, eos) in SUPPORTED.items():
        tok = make_tokenizer(name)
        renders = []
        for ci, (cname, msgs) in enumerate(CONVERSATIONS):
            for agp in (False, True):
                case = {"conversation": ci, "add_generation_prompt": agp}
                try:
                    case["text"] = render(tok, msgs, agp, False)
                    case["ids"] = render(tok, msgs, agp, True)
                    # what greenpipe's tokenizer is asked to do: the rendered
                    # text, special tokens parsed, no BOS added
                    assert case["ids"] == tok(case["text"], add_special_tokens=False)["input_ids"], (name, cname)
                except TemplateError as e:
                    case["error"] = str(e)
                renders.append(case)
        exp["templates"][name] = {"template": key, "tokenizer": tokdir, "renders": renders}
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        f.write(dump_lines(exp))


def dump_lines(exp):
    """JSON with one conversation and one rendering a line: small, and a
    change shows as the lines it touches."""
    d = lambda v: json.dumps(v, ensure_ascii=False)
    lines = ["{", ' "made_with": %s,' % d(exp["made_with"]), ' "conversations": [']
    lines += ["  %s%s" % (d(c), "," if i + 1 < len(exp["conversations"]) else "")
              for i, c in enumerate(exp["conversations"])]
    lines += [" ],", ' "templates": {']
    names = list(exp["templates"])
    for ni, name in enumerate(names):
        t = exp["templates"][name]
        lines.append('  %s: {"template": %s, "tokenizer": %s, "renders": [' % (d(name), d(t["template"]), d(t["tokenizer"])))
        lines += ["   %s%s" % (d(c), "," if i + 1 < len(t["renders"]) else "") for i, c in enumerate(t["renders"])]
        lines.append("  ]}%s" % ("," if ni + 1 < len(names) else ""))
    lines += [" }", "}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
