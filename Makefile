# Convenience wrappers around dev.sh (which needs no make).
.PHONY: demo test setup
demo:
	./dev.sh demo
test:
	./dev.sh test
setup:
	./dev.sh setup
