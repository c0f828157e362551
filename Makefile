# The two commands of the README. Everything else is CMake + Ninja under build/.
BUILD      ?= build
BUILD_SAN  ?= build-san
JOBS       ?= $(shell nproc)
CMAKE_OPTS ?=

.PHONY: all setup build run test test-unit test-san fuzz clean

all: build

setup:
	bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_OPTS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

HOST ?= 127.0.0.1
PORT ?= 8080

# Main job: generate a story with the default model, then serve it (OpenAI API on
# http://$(HOST):$(PORT)/v1 until Ctrl-C).
run: setup build
	bash scripts/get-model.sh
	./$(BUILD)/ridge generate -p "Once upon a time" -n 120
	./$(BUILD)/ridge serve --host $(HOST) --port $(PORT) --chat-template templates/plain.jinja

# Whole suite: unit tests (release), oracle tests against llama.cpp, sanitizer build, fuzz.
test: setup build
	bash scripts/test.sh

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
