/* Entry of the ThreadSanitizer build: the FIFO validation, the blocking and
 * close tests and the stress, compiled with the ring sources under TSan. */
int gp_qtest_ring_fifo(void);
int gp_qtest_ring_block(void);
int gp_qtest_ring_stress(void);

int main(void)
{
    int failed = gp_qtest_ring_fifo();
    failed += gp_qtest_ring_block();
    failed += gp_qtest_ring_stress();
    return failed ? 1 : 0;
}
