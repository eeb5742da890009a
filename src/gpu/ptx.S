/* kernels.ptx as a NUL-terminated string, e0_gpu_ptx (gpu/gpu.c hands it
 * to the driver). The path is relative to the repository root, where make
 * runs. */
    .section .rodata
    .global e0_gpu_ptx
    .type e0_gpu_ptx, @object
    .balign 16
e0_gpu_ptx:
    .incbin "src/gpu/kernels.ptx"
    .byte 0
    .size e0_gpu_ptx, . - e0_gpu_ptx
    .section .note.GNU-stack, "", @progbits
