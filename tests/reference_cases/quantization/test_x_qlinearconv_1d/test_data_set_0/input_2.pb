Bi2J
