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

# Main job: generate a story with the default model.
run: setup build
	bash scripts/get-model.sh
	./$(BUILD)/ridge generate -p "Once upon a time" -n 120

# Whole suite: unit tests (release), oracle tests against llama.cpp, sanitizer build, fuzz.
test: setup build
	bash scripts/test.sh

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
