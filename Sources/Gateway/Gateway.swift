// Gateway module
