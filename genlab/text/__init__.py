"""Text: tokenizers, how a token is shown, chat templates, token healing and grammars."""
