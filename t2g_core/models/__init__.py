"""Models: loading (:mod:`.loading`), GGUF import (:mod:`.gguf`) and the tiny local models built from scratch as
normal Hugging Face folders (:mod:`.tiny`, :mod:`.demo_build`), loaded exactly like a real model id."""
