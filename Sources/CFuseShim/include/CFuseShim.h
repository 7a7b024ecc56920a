int kcfs_shim_placeholder(void);
