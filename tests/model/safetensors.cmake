# Safetensors parser, checkpoint directories and model sources (no GPU needed).
gp_add_test(st_safetensors SOURCES model/test_safetensors.c model/st_builder.c LIBS gp_model)
target_include_directories(st_safetensors PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/model)
gp_add_test(ck_checkpoint SOURCES model/test_checkpoint.c model/st_builder.c LIBS gp_model)
target_include_directories(ck_checkpoint PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/model)
