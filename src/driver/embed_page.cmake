# Writes OUTPUT, a C++ file defining drover::kStatusPageHtml as the text of
# INPUT (run at build time: cmake -DINPUT=... -DOUTPUT=... -P embed_page.cmake).
file(READ "${INPUT}" page)
string(FIND "${page}" ")drover_page\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw string's delimiter )drover_page\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_page.cmake; do not edit.\n"
  "#include \"driver/status_server.h\"\n"
  "namespace drover {\n"
  "const char* const kStatusPageHtml = R\"drover_page(${page})drover_page\";\n"
  "}  // namespace drover\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
