namespace meshpool::rdma {}
